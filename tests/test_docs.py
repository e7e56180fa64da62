"""Issue 16, items 16 and 18: the lab-file reference is generated from the schema and names
every key; the README names every summary field and every output file, and its commands use
subcommands, options and bundled names that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
from click.testing import CliRunner

from mrc.cli import main
from mrc.labs.output.manifest import MANIFEST
from mrc.labs.report.summary_fields import TOP_FIELDS, TRANSPORT_FIELDS
from mrc.labs.run.runner import run_lab
from mrc.labs.schema import faults as fault_section
from mrc.labs.schema.fields import Field
from mrc.labs.schema.files import bundled_names, bundled_sweep_names
from mrc.labs.schema.lab_file import field_tables
from mrc.labs.schema.reference import _title, reference

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def sections(text: str) -> dict[str, str]:
    """Markdown text by heading (## and ###)."""
    out: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        if m := re.match(r"#{2,3} (.*)", line):
            current = m.group(1).strip()
            out[current] = ""
        else:
            out[current] = out.get(current, "") + line + "\n"
    return out


def test_the_reference_page_is_the_generated_text() -> None:
    page = (ROOT / "docs" / "lab-reference.md").read_text(encoding="utf-8")
    assert page == reference(), "regenerate: mrc-lab labs --reference > docs/lab-reference.md"
    result = CliRunner().invoke(main, ["labs", "--reference"])
    assert result.exit_code == 0 and result.output == page


def test_the_reference_names_every_key_of_the_schema_in_its_section() -> None:
    by_title = sections(reference())
    missing = []
    for path, entries in field_tables().items():
        body = by_title.get(_title(path))
        assert body is not None, f"no section for {path}"
        for entry in entries:
            if isinstance(entry, Field):
                row = re.search(rf"^\| `{re.escape(entry.key)}` \| {entry.type} \|", body,
                                re.MULTILINE)
                if row is None:
                    missing.append(f"{path}: {entry.key}")
                elif entry.type in ("integer", "number"):
                    assert entry.upper is not None, f"{path}: {entry.key} has no upper bound"
    assert not missing, missing
    kinds = sections(reference())["`[[fault]]` entries"]
    for kind, targets in fault_section.FAULT_TARGETS.items():
        assert re.search(rf"^\| `{kind}` \| ", kinds, re.MULTILINE), kind
        assert targets or kind == "ev_deny"  # ev_deny names a connection or "all"


def test_the_readme_defines_every_summary_field() -> None:
    text = sections(README)["Summary fields"]
    for key in [*TRANSPORT_FIELDS, *TOP_FIELDS]:
        parts = key.split(".")
        named = f"`{key}`" in text or (len(parts) == 2 and (
            f"`{parts[0]}.*`" in text or f"`{parts[1]}`" in text or f"`.{parts[1]}`" in text))
        assert named, f"README's Summary fields does not define {key}"
    for outcome in ("completed", "failed", "running"):
        assert f"`{outcome}`" in text


def test_the_readme_names_every_output_file(tmp_path: Path) -> None:
    """Every file a run can write (a write_bw lab, a size sweep, a permutation) is named."""
    written: set[str] = set()
    labs = [
        {"workload": {"kind": "write_bw"}, "run": {"duration_us": 30}},
        {"workload": {"kind": "sendrecv", "hosts": [0, 2], "sizes_bytes": [4096, 65536],
                      "iters": 1, "warmup_iters": 0}, "run": {"duration_us": 200}},
        {"workload": {"kind": "permutation", "size_bytes": 8192}, "run": {"duration_us": 100}},
    ]
    for i, lab in enumerate(labs):
        result = run_lab({"name": f"l{i}", "fabric": {"preset": "lab-small"},
                          "transport": {"mrc": {}}, **lab}, progress=False)
        written |= {p.name for p in result.write(tmp_path / f"o{i}")} | {MANIFEST}
    assert {"busbw.png", "collective.csv", "iterations.csv", "flows.csv"} <= written
    outputs = sections(README)["Outputs of a run"]
    for name in sorted(written):
        assert f"`{name}`" in outputs, f"README's output list does not name {name}"


def test_readme_commands_use_what_exists() -> None:
    """Every `mrc-lab ...` in the README: the subcommand and its options exist, and bundled
    names it uses are bundled (the commands themselves were run by hand for the issue)."""
    commands = re.findall(r"mrc-lab (?:run|labs|sweep|fabric|bench)[^`\n|#]*", README)
    assert len(commands) >= 10
    known_names = set(bundled_names()) | set(bundled_sweep_names())
    for text in commands:
        words = shlex.split(re.sub(r"\[([^\]]*)\]", r"\1", text))
        sub = main.commands[words[1]]
        options = {o for p in sub.params if isinstance(p, click.Option)
                   for o in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}
        for word in words[2:]:
            if word.startswith("-"):
                assert word.split("=")[0] in options, f"{text}: unknown option {word}"
        if words[1] in ("run", "sweep") and len(words) > 2 and not words[2].startswith("-"):
            name = words[2]
            if name.isupper():  # a placeholder (LAB, SWEEP.toml)
                continue
            assert name in known_names or name.endswith(".toml"), f"{text}: no lab {name}"
            if name.endswith(".toml"):
                assert (ROOT / name).is_file(), f"{text}: no file {name}"

