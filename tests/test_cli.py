from __future__ import annotations

import subprocess
import sys

from helpers import run_cli

from precsearch import Policy
from precsearch.cli import main


def test_help_does_not_import_tensorflow():
    code = (
        "import sys\n"
        "from precsearch.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "usage: precsearch" in result.stdout


def test_policy_command(tmp_path, capsys):
    path = Policy(default="mixed_bfloat16", types={"Conv2D": "float32"}).save(tmp_path / "p.json")
    assert main(["policy", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mixed_bfloat16" in out and "Conv2D" in out
    # Only what applies: no loss-scale settings where no layer computes in float16.
    assert "loss scale   none (no float16 layer" in out and "dynamic" not in out
    assert "output layer float32" in out and "batch size   yours" in out


def test_policy_command_shows_loss_scaling_and_the_lr_factor_where_they_apply(tmp_path, capsys):
    policy = Policy(default="mixed_float16", batch_size=128, base_batch_size=32, lr_rule="sqrt")
    assert main(["policy", str(policy.save(tmp_path / "p.json"))]) == 0
    out = capsys.readouterr().out
    assert "loss scale   dynamic, initial 32768, growth 2000" in out
    assert "batch size   128 (lr rule sqrt, from batch 32: x2)" in out


def test_policy_command_names_the_output_layer_and_what_it_holds(tmp_path, capsys):
    serving = {
        "signature": "serving_default",
        "inputs": ["pixels"],
        "outputs": {"probs": "probabilities"},
    }
    policy = Policy(default="mixed_bfloat16", manifest={"serving": serving})
    assert main(["policy", str(policy.save(tmp_path / "p.json"))]) == 0
    out = capsys.readouterr().out
    assert "  output layer probs: float32, holds probabilities" in out
    assert "unless a layer rule" not in out
    # A layer rule that names the output by a pattern decides it, as apply() would.
    named = Policy(default="float32", layers={"pro.*": "mixed_bfloat16"}, manifest=policy.manifest)
    assert main(["policy", str(named.save(tmp_path / "named.json"))]) == 0
    assert "  output layer probs: mixed_bfloat16, holds probabilities" in capsys.readouterr().out


def test_bad_policy_file_is_one_line_exit_2(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"format": "precsearch.policy/1", "default": "fp8"}')
    result = run_cli("policy", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "'default'" in lines[0]


def test_bad_flag_exit_2():
    result = run_cli("policy")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
