#include "core/mapped_file.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace deepinfer {
namespace {

// The innermost active guard of this thread. A frame lives on the guarding function's stack.
struct GuardFrame {
  sigjmp_buf env;
  GuardFrame* outer = nullptr;
  const void* address = nullptr;
};
thread_local GuardFrame* t_innermost_guard = nullptr;

struct sigaction g_previous_sigbus;  // written once, under std::call_once, before the handler runs

void OnSigbus(int signal, siginfo_t* info, void* context) {
  GuardFrame* frame = t_innermost_guard;
  if (frame == nullptr) {
    // Not ours: restore the previous action and return; the faulting access runs again and
    // gets it (the default: the process dies with SIGBUS).
    sigaction(SIGBUS, &g_previous_sigbus, nullptr);
    if (!(g_previous_sigbus.sa_flags & SA_SIGINFO) && g_previous_sigbus.sa_handler != SIG_DFL &&
        g_previous_sigbus.sa_handler != SIG_IGN) {
      g_previous_sigbus.sa_handler(signal);
    } else if ((g_previous_sigbus.sa_flags & SA_SIGINFO) && g_previous_sigbus.sa_sigaction != nullptr) {
      g_previous_sigbus.sa_sigaction(signal, info, context);
    }
    return;
  }
  frame->address = info->si_addr;
  siglongjmp(frame->env, 1);
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    // SA_NODEFER: the jump leaves the handler without sigreturn, so SIGBUS must not stay blocked.
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

std::string AddressText(const void* address) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", address);
  return text;
}

}  // namespace

MappedFileFault::MappedFileFault(const void* address)
    : Error("a memory-mapped file was cut short while in use (SIGBUS at " + AddressText(address) + ")"),
      address_(address) {}

namespace detail {

void GuardMappedReadsImpl(void (*run)(void*), void* context) {
  InstallSigbusHandler();
  GuardFrame frame;
  frame.outer = t_innermost_guard;
  // savemask 0: no sigprocmask call per guard (SA_NODEFER keeps the mask unchanged anyway).
  if (sigsetjmp(frame.env, 0) != 0) {
    t_innermost_guard = frame.outer;
    throw MappedFileFault(frame.address);
  }
  t_innermost_guard = &frame;
  try {
    run(context);
  } catch (...) {
    t_innermost_guard = frame.outer;
    throw;
  }
  t_innermost_guard = frame.outer;
}

}  // namespace detail

MappedFile::MappedFile(const std::string& path) : MappedFile(OpenRegularFile(path)) {}

MappedFile::MappedFile(const FileHandle& file) : path_(file.path()), size_(static_cast<size_t>(file.size())) {
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (mapped == MAP_FAILED) throw MakeError(path_, ": cannot mmap ", size_, " bytes: ", std::strerror(errno));
    data_ = static_cast<const uint8_t*>(mapped);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace deepinfer
