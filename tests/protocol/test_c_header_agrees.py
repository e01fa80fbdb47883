"""The C header and the Python module must describe the same wire format.

The C program is generated from the Python definitions, so every constant, struct size and field
offset Python knows about is asked of the compiler; a field or constant missing from the header
fails the build, a different value fails the comparison. The other way round, every name the
header defines must be one that Python knows, so the header cannot grow on its own.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gemshare_nvs import protocol as p
from gemshare_nvs.wire.connection import DEFAULT_SOCKET

HEADER = Path(__file__).resolve().parents[2] / "libnvs" / "wire" / "gemshare_protocol.h"

ENUMS = {"GS_MSG_": p.MsgType, "GS_MODE_": p.Mode, "GS_RELEASE_": p.ReleaseReason,
         "GS_ERROR_": p.ErrorCode, "GS_MPS_PRIORITY_": p.MpsPriority}
SCALARS = {"GS_MAGIC": p.MAGIC, "GS_VERSION": p.VERSION, "GS_MAX_PAYLOAD": p.MAX_PAYLOAD,
           "GS_MAX_ERROR_TEXT": p.MAX_ERROR_TEXT, "GS_REG_UNIFIED_MEMORY": p.REG_UNIFIED_MEMORY,
           "GS_REG_NO_MPS": p.REG_NO_MPS, "GS_REG_VIEW_ONLY": p.REG_VIEW_ONLY,
           "GS_REQUEST_KEEPING": p.REQUEST_KEEPING,
           "GS_GRANT_AFTER_WAIT": p.GRANT_AFTER_WAIT, "GS_GRANT_SHARED": p.GRANT_SHARED,
           "GS_GRANT_OTHERS_RAN": p.GRANT_OTHERS_RAN, "GS_EVICT_ALL": p.EVICT_ALL,
           "GS_MOVED_TO_HOST": p.MOVED_TO_HOST, "GS_MOVED_DONE": p.MOVED_DONE,
           "GS_MOVED_FAILED": p.MOVED_FAILED, "GS_IDLE_HINT_FLOOR_MS": p.IDLE_HINT_FLOOR_MS}


def c_struct_name(cls) -> str:
    return "gs_" + re.sub(r"(?<!^)([A-Z])", r"_\1", cls.__name__).lower()


def expected() -> dict[str, int]:
    facts = dict(SCALARS)
    for prefix, enum in ENUMS.items():
        facts.update({prefix + member.name: int(member) for member in enum})
    facts["sizeof gs_header"] = p.HEADER_SIZE
    for name, offset in zip(("magic", "version", "type", "length", "seq"), (0, 4, 6, 8, 12)):
        facts[f"offsetof gs_header.{name}"] = offset
    facts["sizeof gs_error"] = p.Error.HEAD.size
    facts["offsetof gs_error.code"], facts["offsetof gs_error.reserved"] = 0, 4
    for cls in p.FIXED_MESSAGES.values():
        struct_name = c_struct_name(cls)
        facts[f"sizeof {struct_name}"] = cls.struct().size
        for field, offset in cls.offsets().items():
            facts[f"offsetof {struct_name}.{field}"] = offset
    return facts


def c_program(names) -> str:
    lines = ['#include <stddef.h>', '#include <stdio.h>', f'#include "{HEADER}"',
             "int main(void) {", '  printf("{");']
    for i, name in enumerate(names):
        kind, _, rest = name.partition(" ")
        if kind == "sizeof":
            expr = f"sizeof(struct {rest})"
        elif kind == "offsetof":
            struct_name, field = rest.split(".")
            expr = f"offsetof(struct {struct_name}, {field})"
        else:
            expr = name
        sep = "," if i else ""
        lines.append(f'  printf("{sep}\\"%s\\": %llu", "{name}", (unsigned long long)({expr}));')
    lines += ['  printf("}\\n");', "  return 0;", "}"]
    return "\n".join(lines)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_c_header_matches_python(tmp_path):
    facts = expected()
    source = tmp_path / "facts.c"
    source.write_text(c_program(list(facts)))
    binary = tmp_path / "facts"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-o", str(binary), str(source)],
                   check=True)
    from_c = json.loads(subprocess.run([str(binary)], check=True, capture_output=True,
                                       text=True).stdout)
    assert from_c == facts


def header_names() -> tuple[set[str], set[str]]:
    """The constants (#define and enum members) and the `struct.field` names the header defines."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    constants = set(re.findall(r"^#define (GS_\w+)", text, flags=re.M))
    constants |= set(re.findall(r"\b(GS_\w+)\s*=", text))
    fields = {f"{struct}.{field}"
              for struct, body in re.findall(r"struct (gs_\w+) \{(.*?)\};", text, flags=re.S)
              for field in re.findall(r"(\w+)(?:\[\w+\])?;", body)}
    return constants, fields


def test_the_header_defines_nothing_python_does_not_know():
    constants, fields = header_names()
    known = expected()
    assert constants - {"GS_DEFAULT_SOCKET"} <= set(known), "constants only in the header"
    assert fields <= {name.split(" ", 1)[1] for name in known if name.startswith("offsetof")}, \
        "struct fields only in the header"
    # The parse itself must see the header's contents, or the checks above prove nothing.
    assert {"GS_MSG_DEVICE_UUID", "GS_MSG_LIMITS", "GS_MSG_GANG", "GS_MSG_PING",
            "GS_MSG_PONG"} <= constants
    assert {"gs_register.pod_name", "gs_register.label", "gs_limits.memory_limit",
            "gs_gang.name", "gs_ping.token", "gs_pong.token", "gs_mps.client_priority"} <= fields


def test_the_default_socket_is_the_same():
    match = re.search(r'#define GS_DEFAULT_SOCKET "([^"]+)"', HEADER.read_text())
    assert match and match.group(1) == DEFAULT_SOCKET


def test_every_python_message_type_has_a_layout_or_codec():
    assert set(p.MESSAGES) == set(p.MsgType)
