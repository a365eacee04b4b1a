"""tools/sass_diff.py's parsing (no cuobjdump needed): what counts as the same kernel."""
import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "sass_diff", pathlib.Path(__file__).resolve().parents[2] / "tools" / "sass_diff.py")
sass_diff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_diff)


def _dump(anon_hash, param_offset, reg="R5"):
    return f"""
	code for sm_90a
		Function : _ZN6xstage7kernels3moe48_GLOBAL__N__{anon_hash}_15_ep_transport_cu_0c6cec4516ep_counts_kernelENS1_9EpMoeArgsE
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0010*/                   ULDC UR7, c[0x0][{param_offset}] ;         /* 0x0000000000077ab9 */
        /*0020*/                   IMAD.MOV.U32 {reg}, RZ, RZ, RZ ;          /* 0x000000ffff057224 */
        /*0030*/                   EXIT ;                                     /* 0x000000000000794d */
"""


def test_anonymous_namespace_hash_does_not_split_a_kernel():
    a = sass_diff.parse_sass(_dump("9b658d6b", "0xbb8"))
    b = sass_diff.parse_sass(_dump("eaa32f7b", "0xbb8"))
    assert list(a) == list(b) and len(a) == 1
    assert a == b


def test_parameter_offsets_differ_unless_masked():
    a, b = _dump("1", "0xbb8"), _dump("1", "0xbc8")
    assert sass_diff.parse_sass(a) != sass_diff.parse_sass(b)
    assert sass_diff.parse_sass(a, params_moved=True) == sass_diff.parse_sass(b, params_moved=True)


def test_other_operands_still_differ_when_masked():
    a, b = _dump("1", "0xbb8", "R5"), _dump("1", "0xbc8", "R6")
    assert sass_diff.parse_sass(a, params_moved=True) != sass_diff.parse_sass(b, params_moved=True)
