"""tools/sass_step_model.py on a hand-written SASS loop: the region between the two waits is
found inside its loop, dependent instructions wait for their sources' latency, exponentials
also for the SFU, and a file without a step loop is an error."""
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import sass_step_model as ssm  # noqa: E402

LOOP = """
        /*0100*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24, gsb0 ;
        /*0110*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0120*/                   FADD R1, R2, R3 ;
        /*0130*/                   FADD R4, R1, R3 ;
        /*0140*/                   MUFU.EX2 R5, R4 ;
        /*0150*/                   MUFU.EX2 R6, R2 ;
        /*0160*/                   STS [R7], R5 ;
        /*0170*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0180*/              @P0 BRA 0x100 ;
"""


def test_chain_and_sfu_cycles():
    insns = ssm.parse(LOOP)
    (i, j), = ssm.step_regions(insns)
    region = insns[i + 1:j + 1]
    lat = {"default": 5, "MUFU": 18, "SHFL": 24}
    # FADD at 0 (ready 5), FADD at 5 (ready 10), MUFU at 10 (SFU busy to 14, ready 28),
    # MUFU at 14 (waits for the SFU), STS waits for R5 at 28: 29 cycles.
    assert ssm.model(region, lat, mufu_cycles=4) == 29
    # Without the SFU's occupancy the second exponential issues at 11 and the STS still at 28.
    assert ssm.model(region, lat, mufu_cycles=1) == 29
    assert ssm.model(region, {"default": 1, "MUFU": 1, "SHFL": 1}, mufu_cycles=4) == 8


def test_cli_prints_the_step_and_refuses_a_file_without_one(tmp_path):
    good = tmp_path / "k.sass"
    good.write_text(LOOP)
    r = subprocess.run([sys.executable, str(REPO / "tools" / "sass_step_model.py"), str(good)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "6 instructions, modelled 29 cycles" in r.stdout, r.stdout + r.stderr
    bad = tmp_path / "none.sass"
    bad.write_text(LOOP.replace("@P0 BRA 0x100", "@P0 BRA 0x900"))
    r = subprocess.run([sys.executable, str(REPO / "tools" / "sass_step_model.py"), str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "no step loop" in r.stderr
