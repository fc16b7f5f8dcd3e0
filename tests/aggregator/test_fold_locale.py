"""The C fold reads numbers the same whatever the C locale (``_fold.c``, ``exact_double``).

The aggregator may run inside a host process that calls ``setlocale(LC_NUMERIC, ...)`` with a
comma-decimal locale. The C library's ``strtod`` then reads "1.5" as 1, and the byte scan
used it for the numbers its fast paths cannot decide (over 19 significant digits, subnormals,
past 1e300). It now uses CPython's ``PyOS_string_to_double``, documented as independent of
the locale. What is proven here, and how:

- the built extension imports no locale-sensitive C function (its ELF dynamic symbols, read
  here: no strtod, atof, scanf or printf family, localeconv, ctype tables, ...); and CPython's
  reader is its own correctly rounded one (``sys.float_repr_style == "short"``);
- under a real comma-decimal locale - built by ``localedef`` into a temporary directory from
  an LC_NUMERIC definition written here, loaded through LOCPATH, seen to be in force (the
  C library's strtod reads "1.5" as 1.0 in that process) - every path of the number reader
  gives orjson's double, and an archive whose figures take the slow path folds from its bytes
  to the same report bytes as in the C locale.

This needs glibc's ``localedef`` and its UTF-8 charmap (Debian: package ``locales``); the
test fails, saying so, where they are missing rather than pass without the proof.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from aggregator.fold import _fold
from aggregator.fold.ext import EXT

REPO = Path(__file__).resolve().parents[2]
LOCALE = "xx_XX.UTF-8"
COMMA_NUMERIC = """comment_char %
escape_char /
LC_NUMERIC
decimal_point "<U002C>"
thousands_sep "<U002E>"
grouping 3;3
END LC_NUMERIC
"""
#: the C library's number readers and writers and whatever else reads the locale
LOCALE_SENSITIVE = re.compile(
    r"(__)?(isoc\d\d_)?(v?[sf]?n?printf|v?[sf]?scanf|ato[fil]|atoll|strto(d|f|ld|l|ll|ul|ull|imax|umax)(_l)?|"
    r"wcsto\w+|localeconv|nl_langinfo(_l)?|setlocale|uselocale|newlocale|strcoll|strxfrm|strfmon|"
    r"ctype_(b|tolower|toupper)_loc|is(alnum|alpha|digit|space|punct|upper|lower|xdigit|print|graph|cntrl)|"
    r"to(upper|lower)|strcasecmp|strncasecmp)(_chk)?")
#: tokens for each path of the reader: Clinger, Eisel-Lemire, and exact_double (many digits,
#: subnormal, past the Eisel-Lemire table, past 1e300, a halfway case)
TOKENS = ["1.5", "0.1", "2.5e-3", "123456.789e-2", "1.2345678901234567890123456789", "0.3000000000000000444089209850062616169452667236328125",
          "1.5e-320", "4.9406564584124654e-324", "2.2250738585072011e-308", "1.7976931348623157e308", "3.5e301",
          "9007199254740993.0", "1e-400", "-0.0", "1234567890123456789012345.5", "7.2057594037927933e16"]


def _undefined_symbols(path: Path) -> set[str]:
    """The names an ELF64 little-endian shared object imports (its .dynsym entries with no section)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "an ELF64 little-endian object"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 11:  # SHT_DYNSYM
            continue
        strtab = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name, _, _, shndx = struct.unpack_from("<IBBH", data, at)
            if shndx == 0 and name:
                end = data.index(b"\0", strtab + name)
                names.add(data[strtab + name:end].decode())
    return names


def test_the_extension_imports_no_locale_sensitive_c_function():
    assert EXT is not None
    imported = _undefined_symbols(Path(_fold.__file__))
    libc = {n for n in imported if not n.startswith(("Py", "_Py"))}
    assert "memcpy" in libc  # the reader sees the imports
    assert {n for n in libc if LOCALE_SENSITIVE.fullmatch(n)} == set(), sorted(libc)
    assert "PyOS_string_to_double" in imported
    assert sys.float_repr_style == "short"  # CPython reads floats by its own dtoa.c, not the C library


def test_the_pattern_names_what_the_old_reader_called():
    for name in ("strtod", "__isoc99_sscanf", "__snprintf_chk", "atof", "localeconv", "__ctype_b_loc", "strtod_l"):
        assert LOCALE_SENSITIVE.fullmatch(name), name
    for name in ("memcpy", "strlen", "memcmp", "PyOS_string_to_double"):
        assert not LOCALE_SENSITIVE.fullmatch(name), name


def _comma_locale(tmp: Path) -> Path:
    localedef = shutil.which("localedef")
    assert localedef is not None, "this test needs glibc's localedef (Debian: libc-bin) to build a comma locale"
    source = tmp / "comma-numeric"
    source.write_text(COMMA_NUMERIC)
    out = tmp / "locales"
    out.mkdir()
    # -c: the other categories are not defined (localedef warns, exits 1, writes them empty)
    done = subprocess.run([localedef, "-c", "-i", str(source), "-f", "UTF-8", str(out / LOCALE)],
                          capture_output=True, text=True)
    assert (out / LOCALE / "LC_NUMERIC").exists(), (
        f"localedef could not build a comma-decimal locale (needs the UTF-8 charmap, Debian: locales): {done.stderr}")
    return out


PROBE = r"""
import ctypes, locale, struct, sys
import orjson
sys.path.insert(0, sys.argv[1])
locale.setlocale(locale.LC_NUMERIC, sys.argv[2])
libc = ctypes.CDLL(None)
libc.strtod.restype = ctypes.c_double
libc.strtod.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
trap = (locale.localeconv()["decimal_point"], libc.strtod(b"1.5", None))
from aggregator.fold.ext import EXT
from tests.aggregator.test_fold_locale import TOKENS, archive_report
bits = lambda x: struct.unpack("<Q", struct.pack("<d", x))[0]
read = [bits(EXT.scan_number(t.encode())) for t in TOKENS]
print(orjson.dumps({"trap": trap, "read": read, "report": archive_report().hex()}).decode())
"""


def archive_report() -> bytes:
    """An archive whose figures have 25 significant digits (the reader's slow path), folded from
    its bytes by the C Folder; the report's bytes (every line must be taken from the bytes)."""
    from aggregator.fold.fast import fold_raw, folder
    from aggregator.report import build_report, report_bytes
    from tests.aggregator.test_fold_c_edges import HOURS, Raw, _dumps, _state, line

    names = ["a", "b", "c"]
    lines = []
    for i in range(4):
        rec = line(i, names, dict.fromkeys(names, '"scaphandre_rapl"'))
        gs = rec["report"]["green_summary"]
        gs["per_service_energy_kwh"] = {n: Raw(f"0.{k + 1}234567890123456789012345{i}") for k, n in enumerate(names)}
        gs["per_service_carbon_kgco2eq"] = {n: Raw(f"1.5e-32{k}") for k, n in enumerate(names)}
        lines.append(_dumps(rec, []))
    state = _state({})
    fold = folder(state)
    for raw in lines:
        assert fold_raw(state, raw, HOURS.start, HOURS.end, fold) is not None
    return report_bytes(build_report(state, HOURS))


def test_under_a_comma_decimal_locale_numbers_and_reports_are_the_c_locales(tmp_path):
    assert EXT is not None
    import orjson

    locales = _comma_locale(tmp_path)
    env = {**os.environ, "LOCPATH": str(locales)}
    out = subprocess.run([sys.executable, "-c", PROBE, str(REPO), LOCALE], cwd=REPO, env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    got = orjson.loads(out.stdout)
    assert got["trap"] == [",", 1.0]  # the locale is in force: the C library's strtod stops at the '.'
    want = [struct.unpack("<Q", struct.pack("<d", orjson.loads(t)))[0] for t in TOKENS]
    assert got["read"] == want
    assert bytes.fromhex(got["report"]) == archive_report()
    # in this process (the C locale) the C library reads the same tokens as orjson: the trap was the locale
    libc = ctypes.CDLL(None)
    libc.strtod.restype = ctypes.c_double
    libc.strtod.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    assert libc.strtod(b"1.5", None) == 1.5
