"""A command imports what it uses: the command line registers a command's module when the
command runs (cli/main.COMMANDS), every module only for the group's help."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from specctl.orchestrator.cli import main
from specctl.orchestrator.cli.base import cli
from tests.conftest import HARDWARE


def test_the_table_names_every_command_and_no_other() -> None:
    main.load(None)
    assert set(cli.commands) == set(main.COMMANDS)


def test_the_help_lists_every_command() -> None:
    done = CliRunner().invoke(cli, ["--help"])
    assert done.exit_code == 0
    listed = {line.split()[0] for line in done.output.split("Commands:")[1].splitlines()
              if line.strip()}
    assert listed == set(main.COMMANDS)


def test_plan_loads_no_other_commands_module() -> None:
    code = ("import json, sys\n"
            "from specctl.orchestrator.cli.main import main\n"
            "sys.argv = ['specctl', *json.loads(sys.argv[1])]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith("
            "'specctl.orchestrator.cli.'))), file=sys.stderr)\n")
    args = ["plan", "-p", "cuda-h100-llama70b", "--hardware",
            str(HARDWARE / "linux_1x_h100_80g.json"), "--json"]
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True,
                          text=True, check=True)
    assert json.loads(done.stdout)["profile"] == "cuda-h100-llama70b"
    loaded = {m.rsplit(".", 1)[1] for m in json.loads(done.stderr.strip().splitlines()[-1])}
    assert "setup" in loaded
    assert not loaded & {"measure", "serve", "gateway", "traffic", "inventory"}, loaded
