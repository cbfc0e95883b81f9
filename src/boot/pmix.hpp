// pier::boot: the back ends for external launchers. Internal to src/boot;
// Bootstrap::open() calls detect_external() and open_external().
//
//   pmix  the process was started by a PMIx launcher (Open MPI's mpirun,
//         Slurm's srun --mpi=pmix, prterun): PMIX_RANK and PMIX_NAMESPACE are
//         set. put / commit / fence / get map to PMIx_Put (PMIX_GLOBAL) /
//         PMIx_Commit / PMIx_Fence (collecting data) / PMIx_Get. Built only
//         when libpmix is found.
//   pmi   the process was started by a PMI-1 "simple" server (MPICH's hydra,
//         pier-run): PMI_FD, PMI_RANK and PMI_SIZE are set. Values go through
//         the line protocol hex-encoded and split to the server's vallen_max;
//         fence is barrier_in / barrier_out.
// docs/pmi.md describes both.
#pragma once

#include "boot/boot.hpp"

#include <string_view>

namespace pier::boot {

/// The external launcher this process's environment names: "pmix", "pmi",
/// or "" for none. PMIx wins when both are present (mpirun under hydra).
std::string_view detect_external() noexcept;

/// Opens the back end `method` ("pmix" or "pmi"), connected and initialised.
/// unsupported when pier was built without libpmix; broken when the
/// launcher cannot be reached; invalid_argument for an inconsistent
/// environment. The log says why.
Result<std::unique_ptr<Bootstrap>> open_external(std::string_view method, Deadline deadline);

/// The two back ends behind open_external().
Result<std::unique_ptr<Bootstrap>> open_pmix(Deadline deadline);
Result<std::unique_ptr<Bootstrap>> open_pmi(Deadline deadline);

/// Whether this build has the PMIx back end.
bool have_pmix() noexcept;

}  // namespace pier::boot
