"""The README's drain walkthrough (effect None, then NoExecute) does what it says, in --source mode."""

from __future__ import annotations

import re
import shutil

from tests.e2e.cluster import wait_for
from tests.e2e.harness import DEMO, ROOT, Extender

README = (ROOT / "README.md").read_text()
SECTION = README.split("### Drain a device", 1)[1].split("\n### ", 1)[0]


def rule_file() -> str:
    return re.search(r"<<'YAML'\n(.*?)YAML\n", SECTION, re.S).group(1)


def test_the_drain_walkthrough(tmp_path) -> None:
    directory = tmp_path / "demo"
    shutil.copytree(DEMO, directory)
    ext = Extender("--source", str(directory), command="all")
    try:
        ext.wait_ready()
        assert ext.post("bind", (ROOT / "examples" / "requests" / "bind-trainer.json").read_bytes()).json() == {"Error": ""}
        (directory / "drain-node-a.yaml").write_text(rule_file())
        dry = re.search(r"reason=NoEffect note='(.*?)'", SECTION).group(1)
        wait_for(lambda: dry in ext.logs(), timeout=15, what="the dry-run status in the log")
        assert "deleted pod" not in ext.logs()

        (directory / "drain-node-a.yaml").write_text(rule_file().replace("effect: None", "effect: NoExecute"))
        wait_for(lambda: "deleted pod pod=default/trainer" in ext.logs(), timeout=15, what="trainer deleted")
        deleted = next(line for line in ext.logs().splitlines() if "deleted pod pod=default/trainer" in line)
        for part in re.search(r"deleted pod pod=default/trainer \.\.\. (.*?) mode=delete", SECTION).group(1).split(" "):
            assert part in deleted, (part, deleted)
        completed = re.search(r"reason=Completed note='(.*?)'", SECTION).group(1)
        wait_for(lambda: f"reason=Completed note='{completed}'" in ext.logs(), timeout=30, what="Completed")
        objects = ext.http.get("/debug/objects").json()["objects"]
        assert "default/trainer" not in objects.get("Pod", {})
    finally:
        ext.stop()
