// The MPI backend's entry points in a build without MPI (LEANEMB_WITH_MPI OFF or MPI not found).
#include <cstdlib>

#include "dist/mpi_comm.h"

namespace leanemb::dist {

namespace {
Status no_mpi() {
  return unimplemented(
      "dist: this build has no MPI backend (configure with -DLEANEMB_WITH_MPI=ON and an MPI "
      "installation, e.g. Debian's libopenmpi-dev)");
}
}  // namespace

bool mpi_available() { return false; }
bool MpiRuntime::communication_failed() { return false; }
Result<std::unique_ptr<MpiRuntime>> MpiRuntime::init(int*, char***) { return no_mpi(); }
MpiRuntime::~MpiRuntime() = default;
void MpiRuntime::abort(int code) { std::_Exit(code); }
Result<std::unique_ptr<Communicator>> make_mpi_communicator(const CommOptions&) { return no_mpi(); }

}  // namespace leanemb::dist
