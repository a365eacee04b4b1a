// xstage._C.Team: a team of ranks (include/xstage/team.hpp) built from an NCCL unique id that the
// Python side hands over through a torch.distributed process group (xstage/team.py), so no
// second rendezvous port is needed. Compiled when team.hpp has Team::from_unique_id
// (cmake/python.cmake checks); otherwise has_team is False.
#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <vector>

#include "python/bind.hpp"
#include "xstage/error.hpp"

#if XSTAGE_PY_HAVE_TEAM
#include "xstage/team.hpp"
#endif

namespace nb = nanobind;

namespace xstage::python {

#if XSTAGE_PY_HAVE_TEAM
namespace {

// Owns the C++ team; close() releases it (collective: every rank of the team calls it).
struct PyTeam {
  std::unique_ptr<Team> team;
  Team& get() const {
    if (!team) throw InvalidArgument("team: used after close()");
    return *team;
  }
};

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
      .def("close", [](PyTeam& t) {
        nb::gil_scoped_release release;
        t.team.reset();
      }, "Release the communicator and symmetric buffers (collective).");
}
#else
void bind_team(nb::module_& m) { m.attr("has_team") = false; }
#endif

}  // namespace xstage::python
