"""Review 19: hostile request bytes through the whole C ingest path, decoder to window.

Real requests (5 and 1,000 services; protobuf and OTLP/JSON) are mutated (truncated, bit-flipped,
runs deleted, duplicated or inserted, varints overlong); whatever the C decoders accept is scored
by the C pass and by the numpy reference (the same WAL record), and the accepted batches' partials
make one window in the C accumulator equal to the merge fold of the reference partials, WAL
record and window line included.
"""

from __future__ import annotations

import random

import orjson
from byte_fuzz import PROTOBUF_TOKENS, mutate
from google.protobuf.json_format import MessageToJson

from agent import score_fast
from agent.carbon.partial import WindowAccumulator, WindowPartial
from agent.otlp import decode_json, decode_protobuf
from agent.otlp.errors import OtlpDecodeError
from agent.score import ScoringContext, score_batch_reference
from agent.window import build_report
from bench.workload import make_request

T0 = 1_767_268_800_000_000_000


#: the protobuf tokens and text an OTLP/JSON body or a number parser trips on
_TOKENS = (*PROTOBUF_TOKENS, b'"', b"\\", b"\\u0000", b"1e999", b"99999999999999999999")


def _mutate(rng: random.Random, data: bytes) -> bytes:
    return mutate(rng, data, _TOKENS)


def test_mutated_requests_score_and_accumulate_as_the_reference() -> None:
    rng = random.Random(19)
    requests = [make_request(48, seed=s, services=(None, 1000)[s % 2]) for s in range(4)]
    seeds = [(decode_protobuf, r.SerializeToString()) for r in requests]
    seeds += [(decode_json, MessageToJson(r).encode()) for r in requests]
    ctx = ScoringContext.from_config(None, now_ns=T0)
    fold, acc = WindowPartial.empty(), WindowAccumulator()
    scored = 0
    for i in range(2400):
        decode, data = seeds[i % len(seeds)]
        try:
            batch = decode(_mutate(rng, data))
        except (OtlpDecodeError, ValueError):
            continue
        fast = score_fast.score(batch, ctx)
        assert fast is not None, score_fast.fallbacks()  # a decoder's batch always fits the C pass
        ref = score_batch_reference(batch, ctx)
        assert fast.to_bytes() == ref.to_bytes_reference()
        fold = fold.merge(ref)
        acc.add(WindowPartial.from_bytes(fast.to_bytes()))
        scored += 1
    assert scored > 120, scored
    snap = acc.snapshot()
    assert snap.to_bytes() == fold.to_bytes_reference()
    assert list(snap.counters.items()) == list(fold.counters.items())
    lines = [orjson.dumps(build_report(p, ctx, T0, T0 + 60 * 10**9).model_dump(mode="json"))
             for p in (snap, fold)]
    assert lines[0] == lines[1]
