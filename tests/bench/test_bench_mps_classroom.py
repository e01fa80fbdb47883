"""bench-gpu part `mps`, scenario `classroom`, without a GPU: which setups it runs, with what
scheduler arguments and trainer environment (each run itself needs the GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import mps  # noqa: E402

from gemshare_nvs.config.parsing import parse  # noqa: E402
from gemshare_nvs.core.model.terms import Identity  # noqa: E402
from gemshare_nvs.protocol import MpsPriority  # noqa: E402

TRAINER = Identity(1000, "bob", 100, "users", "python3", "", "", "trainer")


def planned_runs(monkeypatch, directory: Path) -> dict:
    """Each classroom run the scenario asks for, by its result's name, as (setup, scheduler
    arguments, trainer environment), with figures made up so that the ratios come out."""
    runs = {}

    def classroom(python, library, where, name, programs, with_trainer, args=None,
                  trainer_env=None):
        runs[where.name] = (name, args, trainer_env)
        return {"burst_median_s": 0.5, "burst_max_s": 1.0, "trainer_steps_per_s": 2.0}

    monkeypatch.setattr(mps, "classroom", classroom)
    result = mps.classroom_scenario("python3", Path("libnvs.so"), directory)
    low = result["auto_mps_trainer_low"]  # its figures over those alone, as every run's
    assert low["bursts_over_alone"] == {"median": 1.0, "max": 2.0}
    assert low["trainer_of_alone"] == 1.0
    return runs


def rule_terms(args: list[str]):
    """The trainer's terms under the config file that scheduler arguments name."""
    (flag, path) = args
    assert flag == "--config"
    return parse(Path(path).read_text(), path).terms(TRAINER)


def test_plain_mps_runs_the_trainer_at_low_priority_without_a_scheduler(monkeypatch, tmp_path):
    runs = planned_runs(monkeypatch, tmp_path)
    assert runs["mps_trainer_low"] == ("mps", None, {"CUDA_MPS_CLIENT_PRIORITY": "1"})
    assert runs["none"] == ("none", None, {})


def test_auto_mps_gives_the_trainer_a_low_priority_or_an_sm_share_by_rule(monkeypatch, tmp_path):
    runs = planned_runs(monkeypatch, tmp_path)
    assert runs["auto_mps"] == ("auto_mps", [], {})
    name, args, trainer_env = runs["auto_mps_trainer_low"]
    assert (name, trainer_env) == ("auto_mps", {})
    assert rule_terms(args).mps_priority is MpsPriority.LOW
    name, args, _ = runs[f"auto_mps_trainer_sm{mps.TRAINER_SM_SHARE}"]
    assert name == "auto_mps" and rule_terms(args).sm_share == mps.TRAINER_SM_SHARE
