"""tools/sass_loops.py's loop finder on a hand-written listing (no cuobjdump needed): which
backward branches count as tensor-core loops, innermost only by default, spills counted."""
import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "sass_loops", pathlib.Path(__file__).resolve().parents[2] / "tools" / "sass_loops.py")
sass_loops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_loops)

_LISTING = """
	code for sm_90a
		Function : kernel_a
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0020*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, R100, gdesc[UR16], RZ, !UPT ;
        /*0030*/                   STL [R1], R3 ;
        /*0040*/                   QGMMA.64x32x32.F32.E4M3.E4M3 R24, R96, gdesc[UR16], R24 ;
        /*0050*/               @P0 BRA 0x20 ;
        /*0060*/                   LDL R3, [R1] ;
        /*0070*/               @P1 BRA 0x10 ;
        /*0080*/                   IADD3 R4, R4, 0x1, RZ ;
        /*0090*/               @P2 BRA 0x80 ;
        /*00a0*/                   BRA 0xb0 ;
        /*00b0*/                   EXIT ;
		Function : kernel_b
        /*0000*/                   EXIT ;
"""


def test_innermost_tensor_core_loop_only_by_default():
    ks = sass_loops.parse(_LISTING)
    assert list(ks) == ["kernel_a", "kernel_b"]
    inner = sass_loops.loops(ks["kernel_a"])
    assert inner == [{"first": 0x20, "last": 0x50, "instructions": 4, "wgmmas": 2,
                      "shapes": ["64x128x32", "64x32x32"], "local": 1}]
    # --all: the loop around it too; the loop without a wgmma (0x80) and the forward branch never.
    both = sass_loops.loops(ks["kernel_a"], innermost=False)
    assert [(l["first"], l["last"], l["instructions"], l["local"]) for l in both] == [(0x10, 0x70, 7, 2),
                                                                                      (0x20, 0x50, 4, 1)]
    assert sass_loops.loops(ks["kernel_b"]) == []


def test_match_selects_kernels():
    assert list(sass_loops.parse(_LISTING, "_b$")) == ["kernel_b"]


def test_a_second_branch_to_the_same_target_does_not_split_the_loop():
    listing = """
		Function : kernel_c
        /*0000*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ ;
        /*0010*/               @P0 BRA 0x0 ;
        /*0020*/                   IADD3 R4, R4, 0x1, RZ ;
        /*0030*/               @P1 BRA 0x0 ;
        /*0040*/                   EXIT ;
"""
    ls = sass_loops.loops(sass_loops.parse(listing)["kernel_c"])
    assert [(l["first"], l["last"], l["instructions"], l["shapes"]) for l in ls] == [(0x0, 0x30, 4, ["64x128x16"])]


def test_bad_match_is_a_clear_error(capsys):
    assert sass_loops.main(["no-such-binary", "--match", "("]) == 2
    assert "--match" in capsys.readouterr().err
