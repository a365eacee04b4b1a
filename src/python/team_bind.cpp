// xstage._C.Team: a team of ranks (include/xstage/team.hpp) built from an NCCL unique id that the
// Python side hands over through a torch.distributed process group (xstage/team.py), so no
// second rendezvous port is needed. Compiled when team.hpp has Team::from_unique_id
// (cmake/python.cmake checks); otherwise has_team is False. And the operator that needs a team:
// xstage._C.UlyssesOp over ops::UlyssesAttention (include/xstage/ops/ulysses.hpp; has_ulysses).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>
#include <vector>

#include "python/bind.hpp"
#include "xstage/error.hpp"

#if XSTAGE_PY_HAVE_TEAM
#include <nlohmann/json.hpp>

#include "xstage/team.hpp"
#endif
#if XSTAGE_PY_HAVE_TEAM && XSTAGE_PY_HAVE_ULYSSES
#include "xstage/model.hpp"
#include "xstage/ops/ulysses.hpp"
#endif
#if XSTAGE_PY_HAVE_TEAM && XSTAGE_PY_HAVE_MOE
#include "xstage/model.hpp"
#include "xstage/moe_schedule.hpp"
#include "xstage/ops/ep_moe.hpp"
#include "xstage/ops/mega_moe.hpp"
#include "xstage/ops/moe_gemm.hpp"
#endif

namespace nb = nanobind;

namespace xstage::python {

#if XSTAGE_PY_HAVE_TEAM
namespace {

// Owns the C++ team; close() releases it (collective: every rank of the team calls it).
struct PyTeam {
  std::unique_ptr<Team> team;
  int users = 0;  // operators built on the team (they hold references into it)
  Team& get() const {
    if (!team) throw InvalidArgument("team: used after close()");
    return *team;
  }
};

// Held by every operator on a team: the team cannot be closed under it.
struct TeamUse {
  PyTeam* t = nullptr;
  explicit TeamUse(PyTeam& team) : t(&team) { ++t->users; }
  ~TeamUse() { --t->users; }
  TeamUse(const TeamUse&) = delete;
  TeamUse& operator=(const TeamUse&) = delete;
};

#if XSTAGE_PY_HAVE_ULYSSES
// One Ulysses operator per (team, shape): inputs are this rank's heads over the full sequence
// ([B, S, H/P, D], dense, after the pre-attention All-to-All), the output [B, S/P, H, D] lives
// in the operator's symmetric window and is overwritten by the next call.
struct PyUlysses {
  explicit PyUlysses(PyTeam& t) : use(t) {}
  TeamUse use;  // first member: released after the operator
  std::unique_ptr<ops::UlyssesAttention> op;
  ops::UlyssesConfig cfg;
  int world = 1;
  int device = 0;
};

PyUlysses* ulysses_create(PyTeam& team, int dtype, int batch, int seq_len, int heads, int head_dim,
                          float softmax_scale, const std::string& params_json, const std::string& tile) {
  Team& t = team.get();
  auto u = std::make_unique<PyUlysses>(team);
  u->cfg.dtype = dtype == 1 ? ops::AttentionDType::fp16 : ops::AttentionDType::bf16;
  u->cfg.batch = batch;
  u->cfg.seq_len = seq_len;
  u->cfg.heads = heads;
  u->cfg.head_dim = head_dim;
  u->cfg.softmax_scale = softmax_scale;
  u->world = t.world_size();
  u->device = t.device(0);
  ops::validate_ulysses(u->cfg, u->world);
  ops::UlyssesOptions opts;
  if (tile == "long_kv") opts.tile = ops::AttentionTilePolicy::long_kv;
  else if (tile != "staged") throw InvalidArgument("ulysses: tile '" + tile + "' (staged or long_kv)");
  try {
    opts.model = nlohmann::json::parse(params_json).get<model::Params>();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("ulysses: model params: ") + e.what());
  }
  {
    nb::gil_scoped_release release;  // collective
    u->op = std::make_unique<ops::UlyssesAttention>(t, u->cfg, opts);
  }
  return u.release();
}
#endif

#if XSTAGE_PY_HAVE_MOE
// The expert-parallel MoE layer of one rank (W8A8, or W4A8 in the row layout: w4a8_int4,
// w4a8_mxfp4): "unfused" (ops::EpMoeLayer, five kernels) or "mega" (ops::MegaMoeLayer, one
// persistent kernel; schedule expert-wave or interleaved).
struct PyEpMoe {
  explicit PyEpMoe(PyTeam& t) : use(t) {}
  TeamUse use;  // first member: released after the layers
  std::unique_ptr<ops::EpMoeLayer> unfused;
  std::unique_ptr<ops::MegaMoeLayer> mega;
  ops::EpMoeConfig cfg;
};

PyEpMoe* ep_moe_create(PyTeam& team, int hidden, int intermediate, int experts, int top_k, int tokens,
                       const std::string& kind, const std::string& params_json, int ctas, bool per_token) {
  Team& t = team.get();
  auto u = std::make_unique<PyEpMoe>(team);
  u->cfg.hidden = hidden;
  u->cfg.intermediate = intermediate;
  u->cfg.experts = experts;
  u->cfg.top_k = top_k;
  u->cfg.tokens = tokens;
  ops::validate_ep_moe(u->cfg, t.world_size());
  if (kind == "unfused") {
    nb::gil_scoped_release release;  // collective
    u->unfused = std::make_unique<ops::EpMoeLayer>(t, u->cfg);
  } else if (kind == "mega") {
    model::Params params;
    try {
      params = nlohmann::json::parse(params_json).get<model::Params>();
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument(std::string("ep moe: model params: ") + e.what());
    }
    nb::gil_scoped_release release;
    // per_token: the layer takes per-token W4A8 calls (the fused kernel's scratch with the layer).
    u->mega = std::make_unique<ops::MegaMoeLayer>(t, u->cfg, params, 7.0, ctas, per_token);
  } else {
    throw InvalidArgument("ep moe: kind '" + kind + "' (unfused or mega)");
  }
  return u.release();
}

void ep_moe_forward(PyEpMoe& u, uintptr_t topk_experts, uintptr_t topk_weights, uintptr_t x, uintptr_t x_scales,
                    uintptr_t w1, uintptr_t w1_scales, uintptr_t w2, uintptr_t w2_scales, uintptr_t out,
                    const std::string& schedule, uintptr_t stream, const std::string& weights) {
  ops::EpMoeRankInputs in;
  // w*_scales: W8A8 block scales, INT4 group scales, or (w4a8_mxfp4) the E8M0 exponents; the
  // register-operand layouts (int4_lut: channel scales, mxfp4: block scales, as moe.prepack
  // makes them).
  bool known = false;
  for (ops::MoeQuant q : {ops::MoeQuant::w8a8, ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4})
    if (weights == ops::moe_quant_name(q)) in.quant = q, known = true;
  if (weights == "int4_lut") in.quant = ops::MoeQuant::w4a8_int4, in.w_layout = ops::MoeWeightLayout::int4_rs_lut, known = true;
  if (weights == "mxfp4") in.quant = ops::MoeQuant::w4a8_mxfp4, in.w_layout = ops::MoeWeightLayout::mxfp4_rs, known = true;
  // Per-token activations: x_scales [T], W1 gate/up-interleaved (the unfused layer; the fused one
  // where the build has its per-token kernel).
  if (weights == "int4_lut_tok")
    in.quant = ops::MoeQuant::w4a8_int4, in.w_layout = ops::MoeWeightLayout::int4_rs_lut,
    in.act = ops::MoeActScales::per_token, known = true;
  if (weights == "mxfp4_tok")
    in.quant = ops::MoeQuant::w4a8_mxfp4, in.w_layout = ops::MoeWeightLayout::mxfp4_rs,
    in.act = ops::MoeActScales::per_token, known = true;
  if (!known)
    throw InvalidArgument("ep moe: weights '" + weights +
                          "' (w8a8, w4a8_int4, w4a8_mxfp4, int4_lut, mxfp4, int4_lut_tok or mxfp4_tok)");
  const bool e8m0 = in.quant == ops::MoeQuant::w4a8_mxfp4 && in.w_layout == ops::MoeWeightLayout::rows;
  in.topk_experts = reinterpret_cast<const int32_t*>(topk_experts);
  in.topk_weights = reinterpret_cast<const float*>(topk_weights);
  in.x = reinterpret_cast<const void*>(x);
  in.x_scales = reinterpret_cast<const float*>(x_scales);
  in.w1 = reinterpret_cast<const void*>(w1);
  in.w2 = reinterpret_cast<const void*>(w2);
  if (e8m0) {
    in.w1_e8m0 = reinterpret_cast<const uint8_t*>(w1_scales);
    in.w2_e8m0 = reinterpret_cast<const uint8_t*>(w2_scales);
  } else {
    in.w1_scales = reinterpret_cast<const float*>(w1_scales);
    in.w2_scales = reinterpret_cast<const float*>(w2_scales);
  }
  in.out = reinterpret_cast<void*>(out);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (u.unfused) {
    u.unfused->forward(0, in, s);
    return;
  }
  ops::MegaMoeOptions opt;
  if (schedule == "interleaved") opt.schedule = moe::MoeSchedule::interleaved;
  else if (schedule == "expert-wave") opt.schedule = moe::MoeSchedule::expert_wave;
  else if (schedule == "auto") opt.schedule = moe::MoeSchedule::automatic;
  else throw InvalidArgument("ep moe: schedule '" + schedule + "' (interleaved, expert-wave or auto)");
  u.mega->forward(0, in, s, opt);
}
#endif

}  // namespace

void bind_team(nb::module_& m) {
  m.attr("has_team") = true;
  nb::class_<PyTeam>(m, "Team", "A team of one rank per GPU joined by NCCL (xstage::Team).")
      .def_static("new_unique_id", [] {
        const std::vector<char> id = Team::new_unique_id();
        return nb::bytes(id.data(), id.size());
      }, "A fresh NCCL unique id (bytes); one rank creates it, every rank passes it to from_unique_id.")
      .def_static("from_unique_id", [](int rank, int world, int device, nb::bytes id, double wait_timeout_s) {
        std::vector<char> blob(id.c_str(), id.c_str() + id.size());
        TeamOptions opts;
        opts.wait_timeout_s = wait_timeout_s;
        auto t = std::make_unique<PyTeam>();
        {
          nb::gil_scoped_release release;  // blocks until every rank joined
          t->team = Team::from_unique_id(opts, rank, world, device, blob);
        }
        return t.release();
      }, nb::arg("rank"), nb::arg("world"), nb::arg("device"), nb::arg("unique_id"), nb::arg("wait_timeout_s") = 5.0,
      nb::rv_policy::take_ownership, "Collective: every rank calls it with the same id.")
      .def_prop_ro("world_size", [](const PyTeam& t) { return t.get().world_size(); })
      .def_prop_ro("rank", [](const PyTeam& t) { return t.get().rank(0); })
      .def_prop_ro("device", [](const PyTeam& t) { return t.get().device(0); })
      .def_prop_ro("closed", [](const PyTeam& t) { return !t.team; })
      .def("check_device_status", [](PyTeam& t) { t.get().check_device_status(0); },
           "Raises RuntimeError with the story of a device-side wait that timed out (and clears it).")
      .def_prop_ro("users", [](const PyTeam& t) { return t.users; }, "Operators still built on the team.")
      .def("close", [](PyTeam& t) {
        if (t.users > 0)
          throw InvalidArgument("team: " + std::to_string(t.users) +
                                " operator(s) still use it; delete them (and the modules holding them) first");
        nb::gil_scoped_release release;
        t.team.reset();
      }, "Release the communicator and symmetric buffers (collective).");
#if XSTAGE_PY_HAVE_ULYSSES
  m.attr("has_ulysses") = true;
  nb::class_<PyUlysses>(m, "UlyssesOp", "ops::UlyssesAttention of one rank (its team must outlive it).")
      .def(nb::new_([](PyTeam& team, int dtype, int batch, int seq_len, int heads, int head_dim, float scale,
                       const std::string& params_json, const std::string& tile) {
             return ulysses_create(team, dtype, batch, seq_len, heads, head_dim, scale, params_json, tile);
           }),
           nb::arg("team"), nb::arg("dtype"), nb::arg("batch"), nb::arg("seq_len"), nb::arg("heads"),
           nb::arg("head_dim"), nb::arg("softmax_scale"), nb::arg("params_json"), nb::arg("tile") = "staged",
           nb::keep_alive<1, 2>(),
           "Collective: every rank of the team constructs it with the same shape.")
      .def("forward", [](PyUlysses& u, uintptr_t q, uintptr_t k, uintptr_t v, const std::string& variant,
                         uintptr_t stream) {
        u.op->forward(0, reinterpret_cast<const void*>(q), reinterpret_cast<const void*>(k),
                      reinterpret_cast<const void*>(v), ops::parse_variant(variant),
                      reinterpret_cast<cudaStream_t>(stream));
      }, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("variant"), nb::arg("stream"),
      "One call (every rank the same calls in the same order), asynchronous on `stream`.")
      .def("output", [](nb::handle self) {
        PyUlysses& u = nb::cast<PyUlysses&>(self);
        const size_t shape[4] = {static_cast<size_t>(u.cfg.batch), static_cast<size_t>(u.cfg.seq_len / u.world),
                                 static_cast<size_t>(u.cfg.heads), static_cast<size_t>(u.cfg.head_dim)};
        const nb::dlpack::dtype dt{static_cast<uint8_t>(u.cfg.dtype == ops::AttentionDType::bf16
                                                            ? nb::dlpack::dtype_code::Bfloat
                                                            : nb::dlpack::dtype_code::Float),
                                   16, 1};
        return nb::ndarray<nb::device::cuda>(u.op->output(0), 4, shape, self, nullptr, dt, nb::device::cuda::value,
                                             u.device);
      }, "The output window [B, S/P, H, D] as a DLPack view (overwritten by the next call).");
#else
  m.attr("has_ulysses") = false;
#endif
#if XSTAGE_PY_HAVE_MOE
  m.attr("has_ep_moe") = true;
  // The fused layer's register-operand W4A8 kernel (weights "int4_lut" / "mxfp4" with kind "mega";
  // CMake option XSTAGE_MEGA_W4A8_RS).
  m.attr("has_mega_w4a8_rs") = ops::MegaMoeLayer::register_operand_w4a8_built();
  // The fused layer's per-token W4A8 kernel (weights "int4_lut_tok" / "mxfp4_tok" with kind "mega";
  // CMake option XSTAGE_MEGA_W4A8_TOK).
  m.attr("has_mega_w4a8_tok") = ops::MegaMoeLayer::per_token_w4a8_built();
  nb::class_<PyEpMoe>(m, "EpMoeOp",
                      "The expert-parallel MoE layer of one rank, W8A8 or W4A8 (its team must outlive it).")
      .def(nb::new_(&ep_moe_create), nb::arg("team"), nb::arg("hidden"), nb::arg("intermediate"),
           nb::arg("experts"), nb::arg("top_k"), nb::arg("tokens"), nb::arg("kind"), nb::arg("params_json"),
           nb::arg("ctas") = 0, nb::arg("per_token") = false, nb::keep_alive<1, 2>(),
           "Collective: every rank constructs it with the same configuration (tokens per rank).")
      .def("forward", &ep_moe_forward, nb::arg("topk_experts"), nb::arg("topk_weights"), nb::arg("x"),
           nb::arg("x_scales"), nb::arg("w1"), nb::arg("w1_scales"), nb::arg("w2"), nb::arg("w2_scales"),
           nb::arg("out"), nb::arg("schedule"), nb::arg("stream"), nb::arg("weights") = "w8a8",
           "One call on raw device pointers (every rank the same calls in the same order), asynchronous.");
#else
  m.attr("has_ep_moe") = false;
  m.attr("has_mega_w4a8_rs") = false;
  m.attr("has_mega_w4a8_tok") = false;
#endif
}
#else
void bind_team(nb::module_& m) {
  m.attr("has_team") = false;
  m.attr("has_ulysses") = false;
  m.attr("has_ep_moe") = false;
  m.attr("has_mega_w4a8_rs") = false;
  m.attr("has_mega_w4a8_tok") = false;
}
#endif

}  // namespace xstage::python
