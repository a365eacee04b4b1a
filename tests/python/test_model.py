"""xstage.model: the C++ Burst-Gap model from Python (no GPU, no torch)."""
import json
import os

import pytest

from conftest import REPO, needs_ext
from xstage import model

pytestmark = needs_ext

PROBE = os.path.join(REPO, "results", "probe-h200x2", "probe.json")


def test_preset_loads():
    p = model.preset()
    assert p.sm_count == 132
    assert p.data["schema"] == model.SCHEMA
    assert "H200" in p.source
    assert "T0(B)" in p.format()


def test_predict_matches_the_equations():
    p = model.preset()
    r = model.predict(132, 16384, 2.0)
    assert r.volume_bytes == 132 * 16384
    # issue span is the largest of the three terms; the period adds G (and delta when drain-bound)
    assert r.issue_us == pytest.approx(max(r.t0_us, r.drain_term_us, r.fill_term_us))
    assert r.regime in ("issue_bound", "drain_bound", "fill_bound")
    if r.regime == "drain_bound":
        assert r.period_us == pytest.approx(r.issue_us + 2.0 + r.delta_us)
    assert r.backpressure_us == pytest.approx(r.issue_us - r.t0_us)
    assert p.predict(132, 16384, 2.0) == r
    # A small isolated burst is issue-bound and free of backpressure.
    small = model.predict(16, 1024, 50.0)
    assert small.regime == "issue_bound" and small.backpressure_free


def test_predict_same_as_params_mapping():
    data = model.preset().to_dict()
    assert model.predict(66, 65536, 1.0, params=data) == model.predict(66, 65536, 1.0)


@pytest.mark.parametrize("args, word", [
    ((132, 17, 2.0), "multiple of 16"),
    ((0, 1024, 2.0), "producers"),
    ((500, 1024, 2.0), "132"),
    ((16, 1024, -1.0), "gap"),
    ((16, 1024, float("nan")), "gap"),
])
def test_predict_bad_inputs_are_one_line_value_errors(args, word):
    with pytest.raises(ValueError) as e:
        model.predict(*args)
    msg = str(e.value)
    assert "\n" not in msg and word.lower() in msg.lower()


def test_predict_type_errors():
    with pytest.raises(TypeError):
        model.predict("132", 1024, 1.0)
    with pytest.raises(TypeError):
        model.predict(132, 1024, "1.0")


def test_max_producers_zero_lifts_the_sm_limit():
    assert model.predict(500, 1024, 1.0, max_producers=0).volume_bytes == 500 * 1024


def test_bad_params():
    bad = model.preset().to_dict()
    bad["r_agg_gbps"] = -1
    with pytest.raises(ValueError):
        model.Params.from_dict(bad)
    with pytest.raises(ValueError):
        model.Params.from_json("{not json")
    with pytest.raises(ValueError):
        model.load_params("/nonexistent/params.json")
    with pytest.raises(ValueError):
        model.preset("a100")


def test_params_round_trip(tmp_path):
    p = model.preset()
    f = tmp_path / "p.json"
    p.save(f)
    assert model.load_params(f).data == p.data


@pytest.mark.skipif(not os.path.exists(PROBE), reason="results/probe-h200x2/probe.json not in this checkout")
def test_fit_reproduces_the_committed_fit():
    r = model.fit(PROBE)
    ref = json.load(open(os.path.join(REPO, "results", "probe-h200x2", "params.json")))
    assert r.params.data["r_agg_gbps"] == pytest.approx(ref["r_agg_gbps"], rel=1e-9)
    assert [e["producers"] for e in r.params.data["r"]] == [e["producers"] for e in ref["r"]]
    assert r.validation["points"]
    # options reach the C++ fitter
    with pytest.raises(ValueError):
        model.fit(PROBE, not_an_option=1)


def test_fit_bad_data():
    with pytest.raises(ValueError):
        model.fit({"points": []})


def test_ops_without_torch_say_so():
    import importlib.util

    import xstage

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is importable here")
    with pytest.raises(ImportError) as e:
        xstage.attention
    assert "needs PyTorch" in str(e.value)
