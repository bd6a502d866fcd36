// An NVTX injection library for tests: what a profiler sees of tetra's ranges, without a profiler.
// NVTX loads the library named by NVTX_INJECTION64_PATH at the first NVTX call and calls its
// InitializeInjectionNvtx2, which here points the domain callbacks at functions that append
//   create DOMAIN          (each nvtxDomainCreateA)
//   push DOMAIN MESSAGE    (each nvtxDomainRangePushEx with an ASCII message)
//   pop DOMAIN             (each nvtxDomainRangePop)
// to $NVTX_RECORD_FILE.PID, one line each (one file per process: one per MPI rank).
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

std::mutex mu;
std::FILE* record = nullptr;
std::vector<std::string> domain_names;  // a domain handle is 1 + its index here

const char* domain_name(nvtxDomainHandle_t d) {
  const auto i = reinterpret_cast<uintptr_t>(d);
  return i >= 1 && i <= domain_names.size() ? domain_names[i - 1].c_str() : "?";
}

nvtxDomainHandle_t NVTX_API create_domain(const char* name) {
  std::lock_guard<std::mutex> lock(mu);
  domain_names.emplace_back(name ? name : "");
  std::fprintf(record, "create %s\n", domain_names.back().c_str());
  return reinterpret_cast<nvtxDomainHandle_t>(static_cast<uintptr_t>(domain_names.size()));
}

int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(mu);
  const bool ascii = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii;
  std::fprintf(record, "push %s %s\n", domain_name(d), ascii ? a->message.ascii : "(no ascii message)");
  return 0;
}

int NVTX_API pop(nvtxDomainHandle_t d) {
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(record, "pop %s\n", domain_name(d));
  std::fflush(record);
  return 0;
}

}  // namespace

extern "C" NVTX_DYNAMIC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* prefix = std::getenv("NVTX_RECORD_FILE");
  if (!prefix) return 0;  // 0: injection failed, NVTX calls stay no-ops
  // Every module that carries NVTX (tetra, and NCCL or cuBLAS with ranges of their own) initialises
  // its own copy and calls this once: the file is opened by the first and kept.
  if (!record) record = std::fopen((std::string(prefix) + "." + std::to_string(getpid())).c_str(), "w");
  if (!record) return 0;
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&create_domain);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}
