"""Interop: our Merkle hashes, notes, checkpoints, cosignatures and DSSE encoding against the
published vectors of other implementations (values copied as facts, with their source).

- RFC 6962 leaves, roots, inclusion and consistency proofs: transparency-dev/merkle
  ``testonly/constants.go`` and ``proof/verify_test.go`` (Apache-2.0; the same vectors as
  certificate-transparency-go). Their proof vectors number leaves from 1.
- Signed note: golang.org/x/mod/sumdb/note ``note_test.go`` (BSD-3-Clause), the PeterNeumann
  key pair and note.
- Checkpoint, cosignature and add-checkpoint request: the examples of C2SP ``tlog-checkpoint.md``,
  ``tlog-cosignature.md`` and ``tlog-witness.md`` (whole notes with their signature lines;
  the specs publish no keys, so their signatures are checked for framing, not verified).
- DSSE PAE: secure-systems-lab/dsse ``protocol.md``; Ed25519: RFC 8032 §7.1 test 1.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schema.checkpoint import Checkpoint
from schema.dsse import PAYLOAD_TYPE, open_envelope, pae, sign_envelope
from schema.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    ProofError,
    leaf_hash,
    root_from_inclusion,
    verify_consistency,
    verify_inclusion,
)
from schema.note import (
    COSIGNATURE_V1,
    NoteError,
    Signer,
    Verifier,
    check_signature,
    cosign,
    cosign_message,
    open_note,
    sign_note,
    split_note,
)

h = bytes.fromhex
LEAVES = [h(x) for x in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                         "606162636465666768696a6b6c6d6e6f")]
ROOTS = [h(x) for x in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")]
# (leaf number from 1, tree size, proof)
INCLUSION = [
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (2, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]
CONSISTENCY = [
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (6, 7, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_TEXT = ("If you think cryptography is the answer to your problem,\n"
           "then you don't know what your problem is.\n")
GO_NOTE = GO_TEXT + ("\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2p"
                     "ZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n")
C2SP_CHECKPOINT = ("example.com/behind-the-sofa\n20852163\n"
                   "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")


def tree(n: int) -> MerkleTree:
    return MerkleTree(leaf_hash(x) for x in LEAVES[:n])


def test_roots_match_rfc6962_for_every_size() -> None:
    assert tree(0).root() == EMPTY_ROOT == h("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    for n in range(1, 9):
        assert tree(8).root(n) == ROOTS[n - 1] == tree(n).root()


@pytest.mark.parametrize("leaf,size,proof", INCLUSION)
def test_inclusion_proofs_match_and_verify(leaf: int, size: int, proof: list[str]) -> None:
    t, want = tree(8), [h(p) for p in proof]
    assert t.inclusion_proof(leaf - 1, size) == want
    verify_inclusion(leaf - 1, size, leaf_hash(LEAVES[leaf - 1]), want, ROOTS[size - 1])
    bad = [  # the corruptions transparency-dev's verifier test rejects
        (leaf, size, want), (leaf - 1, size * 2, want), (leaf - 1, size, want[:-1]),
        (leaf - 1, size, [*want, ROOTS[size - 1]]), (leaf - 1, size, [ROOTS[size - 1], *want]),
    ] + [(leaf - 1, size, [bytes([p[0] ^ 8]) + p[1:] if j == i else p for j, p in enumerate(want)])
         for i in range(len(want))]
    for index, n, path in bad:
        with pytest.raises(ProofError):
            verify_inclusion(index, n, leaf_hash(LEAVES[leaf - 1]), path, ROOTS[size - 1])


@pytest.mark.parametrize("old,new,proof", CONSISTENCY)
def test_consistency_proofs_match_and_verify(old: int, new: int, proof: list[str]) -> None:
    t, want = tree(8), [h(p) for p in proof]
    assert t.consistency_proof(old, new) == want
    verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], want)
    for args in [(old, new, ROOTS[new - 1], ROOTS[old - 1], want),  # swapped roots
                 (old, new, ROOTS[old - 1], ROOTS[new - 1], want[:-1]),  # truncated
                 (old, new, ROOTS[old - 1], ROOTS[new - 1], [*want, want[0]]),
                 (old, new, ROOTS[old - 1], ROOTS[new - 1], [])]:
        with pytest.raises(ProofError):
            verify_consistency(*args)


@given(st.integers(1, 80), st.data())
def test_every_proof_of_every_tree_verifies(n: int, data: st.DataObject) -> None:
    t = MerkleTree(leaf_hash(i.to_bytes(2, "big")) for i in range(n))
    i = data.draw(st.integers(0, n - 1))
    m = data.draw(st.integers(0, n))
    assert root_from_inclusion(i, n, t.leaf(i), t.inclusion_proof(i)) == t.root()
    verify_consistency(m, n, t.root(m), t.root(n), t.consistency_proof(m, n))


def test_go_signed_note_vector_signs_and_verifies_byte_for_byte() -> None:
    v, s = Verifier.parse(GO_VKEY), Signer.parse(GO_SKEY)
    assert v.encode() == GO_VKEY and s.encode() == GO_SKEY and s.verifier == v
    assert sign_note(GO_TEXT, [s]) == GO_NOTE  # Ed25519 is deterministic (RFC 8032)
    assert open_note(GO_NOTE, v) == GO_TEXT
    with pytest.raises(NoteError):
        open_note(GO_NOTE.replace("cryptography", "cryptographY"), v)
    with pytest.raises(NoteError):
        Verifier.parse(GO_VKEY.replace("c74f20a3", "c74f20a4"))


def test_c2sp_checkpoint_example_parses_and_round_trips() -> None:
    cp = Checkpoint.parse(C2SP_CHECKPOINT)
    assert (cp.origin, cp.size) == ("example.com/behind-the-sofa", 20852163)
    assert cp.text() == C2SP_CHECKPOINT
    for bad in ("a\n01\n" + C2SP_CHECKPOINT.split("\n")[2] + "\n", "a\n1\n", "a\n1\nAAAA\n"):
        with pytest.raises(NoteError):
            Checkpoint.parse(bad)


def test_cosigned_message_is_the_c2sp_example_and_verifies() -> None:
    assert cosign_message(C2SP_CHECKPOINT, 1679315147) == (
        b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n"
        b"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")
    w = Signer.generate("witness.example.com/w1", COSIGNATURE_V1)
    sig = cosign(C2SP_CHECKPOINT, w, 1679315147)
    assert len(base64.b64decode(sig.line().split()[-1])) == 4 + 8 + 64
    note = C2SP_CHECKPOINT + "\n" + sig.line()
    _, sigs = split_note(note)
    assert check_signature(C2SP_CHECKPOINT, sigs[0], w.verifier) == 1679315147
    assert check_signature(C2SP_CHECKPOINT.replace("20852163", "20852164"), sigs[0], w.verifier) is None


def test_dsse_pae_and_rfc8032_vectors() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    s = Signer("rfc8032", h("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
    assert s.verifier.public == h("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    assert s.sign(b"") == h("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590"
                            "a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    env = sign_envelope(b'{"a":1}', s)
    assert env["payloadType"] == PAYLOAD_TYPE
    assert open_envelope(env, [s.verifier]) == (b'{"a":1}', s.verifier)
    env["payload"] = base64.b64encode(b'{"a":2}').decode()
    with pytest.raises(NoteError):
        open_envelope(env, [s.verifier])


# The whole examples of C2SP tlog-checkpoint.md, tlog-cosignature.md and tlog-witness.md (the
# specs publish no keys for them, so what is checked is the framing: every signature line, the
# cosignature's key ID and timestamp, and the add-checkpoint request body).
C2SP_LOG_SIG = ("\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5"
                "/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n")
C2SP_LOG_SIG2 = ("\u2014 example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks"
                 "+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n")
C2SP_COSIG = ("\u2014 witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dl"
              "rDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n")
C2SP_WITNESS_REQUEST = ("old 20852014\nPlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n"
                        "jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n"
                        "5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n"
                        "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n\n"
                        + C2SP_CHECKPOINT + "\n" + C2SP_LOG_SIG + C2SP_LOG_SIG2)


def test_the_c2sp_signed_checkpoint_and_cosignature_examples_parse() -> None:
    import struct

    from agent.witness_push import cosignatures
    from schema.note import COSIGNATURE_BYTES

    text, sigs = split_note(C2SP_CHECKPOINT + "\n" + C2SP_LOG_SIG + C2SP_COSIG)
    assert text == C2SP_CHECKPOINT and [s.name for s in sigs] == [
        "example.com/behind-the-sofa", "witness.example.com/w1"]
    assert len(sigs[0].blob) == 64  # an Ed25519 note signature after its key ID
    cosig = sigs[1]
    assert cosig.key_id == h("8d66cf3f") and len(cosig.blob) == COSIGNATURE_BYTES
    assert struct.unpack(">Q", cosig.blob[:8])[0] == 1679315147  # the spec's "time 1679315147"
    assert cosig.line() == C2SP_COSIG  # round-trips byte for byte
    # an agent receiving the spec's witness answer keeps it: a cosignature under a new name
    assert cosignatures([cosig], sigs[:1]) == [cosig]
    assert cosignatures(sigs[:1], sigs[:1]) == []  # but never a line under the log's own name


def test_the_c2sp_add_checkpoint_request_example_parses() -> None:
    from witness.state import _parse_request

    old, proof, note = _parse_request(C2SP_WITNESS_REQUEST.encode())
    assert old == 20852014 and len(proof) == 4 and all(len(p) == 32 for p in proof)
    text, sigs = split_note(note)
    assert Checkpoint.parse(text).size == 20852163 and len(sigs) == 2
