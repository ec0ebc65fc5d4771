// tools/rdsrun.cc — runs a command with rds-preload loaded into it.
//
//   rdsrun [--lib PATH] [--check] [--force] [--verbose] [--] CMD [ARG...]
//
// Sets LD_PRELOAD to the absolute path of librds_preload.so (keeping the
// entries already there) and executes CMD in place, so the exit status and
// the pid are CMD's own. Before that it checks that the dynamic loader will
// really load the shim into CMD, and says so clearly when it will not:
//   * a statically linked program has no dynamic loader (no PT_INTERP);
//   * a set-user-ID / set-group-ID / file-capability program runs in secure
//     execution mode, where the loader ignores LD_PRELOAD paths with a '/';
//   * a Go program makes system calls directly, not through libc;
//   * a program for another ELF class or machine cannot load this library;
//   * finally the program's own loader is asked (`ld.so --list` with the new
//     LD_PRELOAD, which loads nothing and runs nothing) whether the shim and
//     its dependencies load.
// Scripts are followed to their interpreter (#!, including `#!/usr/bin/env
// NAME`). See rdsrun(1) (docs/man/rdsrun.1.in).
//
// Exit status: CMD's; 127 when the shim cannot be loaded into CMD (or the
// library is missing); 126 when CMD cannot be executed (not found, not
// executable); 125 for rdsrun's own usage errors.
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tools/tool_flags.h"

ABSL_FLAG(std::string, lib, "",
          "the rds-preload library (default: librds_preload.so installed next to rdsrun)");
ABSL_FLAG(bool, check, false,
          "only check that the shim would load into CMD: print the verdict and exit 0 or 127");
ABSL_FLAG(bool, force, false, "run CMD even when the checks say the shim will not be loaded");
ABSL_FLAG(bool, verbose, false, "print what was checked");

#ifndef RDSRUN_LIBDIR_FROM_BINDIR
#define RDSRUN_LIBDIR_FROM_BINDIR "../lib"
#endif
#ifndef RDSRUN_INSTALLED_LIB
#define RDSRUN_INSTALLED_LIB ""
#endif

namespace {

constexpr int kExitNoShim = 127;
constexpr int kExitCannotExec = 126;
constexpr int kExitUsage = 125;
constexpr const char kLibName[] = "librds_preload.so";

bool g_verbose = false;

void Say(const std::string& msg) { fprintf(stderr, "rdsrun: %s\n", msg.c_str()); }
void Verbose(const std::string& msg) {
  if (g_verbose) Say(msg);
}

std::optional<std::string> RealPath(const std::string& p) {
  char buf[PATH_MAX];
  if (realpath(p.c_str(), buf) == nullptr) return std::nullopt;
  return std::string(buf);
}

std::string Dirname(const std::string& p) {
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// The library: --lib, or next to this executable (installed layout:
// <prefix>/bin/rdsrun and <prefix>/<libdir>/librds_preload.so; build tree:
// build/tools/rdsrun and build/preload/librds_preload.so).
std::optional<std::string> FindLibrary(const std::string& flag, std::vector<std::string>* tried) {
  std::vector<std::string> candidates;
  if (!flag.empty()) {
    candidates.push_back(flag);
  } else {
    std::optional<std::string> self = RealPath("/proc/self/exe");
    if (self) {
      std::string dir = Dirname(*self);
      candidates.push_back(absl::StrCat(dir, "/", RDSRUN_LIBDIR_FROM_BINDIR, "/", kLibName));
      candidates.push_back(absl::StrCat(dir, "/../lib/", kLibName));
      candidates.push_back(absl::StrCat(dir, "/../lib64/", kLibName));
      candidates.push_back(absl::StrCat(dir, "/", kLibName));
      candidates.push_back(absl::StrCat(dir, "/../preload/", kLibName));
    }
    if (*RDSRUN_INSTALLED_LIB) candidates.push_back(RDSRUN_INSTALLED_LIB);
  }
  for (const std::string& c : candidates) {
    tried->push_back(c);
    struct stat st;
    if (stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return RealPath(c);
  }
  return std::nullopt;
}

// execvp's search, done here so that the file checked is the file run.
std::optional<std::string> ResolveCommand(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  std::string search = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (absl::string_view dir : absl::StrSplit(search, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// ELF inspection.

struct ElfInfo {
  bool is_elf = false;
  int elf_class = 0;  // ELFCLASS32 / ELFCLASS64
  int data = 0;       // ELFDATA2LSB / ELFDATA2MSB
  int machine = 0;
  int type = 0;       // ET_EXEC / ET_DYN
  std::string interp; // PT_INTERP ("" for a static program)
  bool has_dynamic = false;
  bool go = false;    // a Go program (.note.go.buildid / .go.buildinfo)
  std::string problem;  // unreadable or malformed
};

bool ReadAt(int fd, void* buf, size_t n, off_t off) {
  return pread(fd, buf, n, off) == static_cast<ssize_t>(n);
}

template <typename Ehdr, typename Phdr, typename Shdr>
void ReadElf(int fd, ElfInfo* info) {
  Ehdr eh;
  if (!ReadAt(fd, &eh, sizeof(eh), 0)) {
    info->problem = "truncated ELF header";
    return;
  }
  info->machine = eh.e_machine;
  info->type = eh.e_type;
  if (eh.e_phentsize == sizeof(Phdr) && eh.e_phnum < 4096) {
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
      Phdr ph;
      if (!ReadAt(fd, &ph, sizeof(ph), eh.e_phoff + i * sizeof(Phdr))) break;
      if (ph.p_type == PT_DYNAMIC) info->has_dynamic = true;
      if (ph.p_type == PT_INTERP && ph.p_filesz > 1 && ph.p_filesz < PATH_MAX) {
        std::string interp(ph.p_filesz, '\0');
        if (ReadAt(fd, interp.data(), interp.size(), ph.p_offset)) {
          info->interp = interp.c_str();  // up to the NUL
        }
      }
    }
  }
  // Section names, for Go: its linker always writes .note.go.buildid (and
  // .go.buildinfo since Go 1.13). Stripped binaries keep both.
  if (eh.e_shentsize == sizeof(Shdr) && eh.e_shnum > 0 && eh.e_shnum < 65280 &&
      eh.e_shstrndx < eh.e_shnum) {
    Shdr strtab;
    if (!ReadAt(fd, &strtab, sizeof(strtab), eh.e_shoff + eh.e_shstrndx * sizeof(Shdr))) return;
    if (strtab.sh_size == 0 || strtab.sh_size > (16u << 20)) return;
    std::string names(strtab.sh_size, '\0');
    if (!ReadAt(fd, names.data(), names.size(), strtab.sh_offset)) return;
    for (unsigned i = 0; i < eh.e_shnum; ++i) {
      Shdr sh;
      if (!ReadAt(fd, &sh, sizeof(sh), eh.e_shoff + i * sizeof(Shdr))) break;
      if (sh.sh_name >= names.size()) continue;
      const char* name = names.c_str() + sh.sh_name;
      if (strcmp(name, ".note.go.buildid") == 0 || strcmp(name, ".go.buildinfo") == 0) {
        info->go = true;
      }
    }
  }
}

ElfInfo InspectElf(const std::string& path) {
  ElfInfo info;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    info.problem = strerror(errno);
    return info;
  }
  unsigned char ident[EI_NIDENT];
  if (ReadAt(fd, ident, sizeof(ident), 0) && memcmp(ident, ELFMAG, SELFMAG) == 0) {
    info.is_elf = true;
    info.elf_class = ident[EI_CLASS];
    info.data = ident[EI_DATA];
    bool native = (info.data == ELFDATA2LSB) == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
    if (!native) {
      info.problem = "byte order differs from this machine's";
    } else if (info.elf_class == ELFCLASS64) {
      ReadElf<Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr>(fd, &info);
    } else if (info.elf_class == ELFCLASS32) {
      ReadElf<Elf32_Ehdr, Elf32_Phdr, Elf32_Shdr>(fd, &info);
    } else {
      info.problem = "unknown ELF class";
    }
  }
  close(fd);
  return info;
}

std::string ClassName(int c) { return c == ELFCLASS32 ? "32-bit" : c == ELFCLASS64 ? "64-bit" : "?"; }

// "#!interp [arg]" of a script, or nullopt.
std::optional<std::pair<std::string, std::string>> Shebang(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n < 3 || buf[0] != '#' || buf[1] != '!') return std::nullopt;
  buf[n] = '\0';
  std::string line(buf + 2, strcspn(buf + 2, "\n"));
  absl::string_view rest = absl::StripAsciiWhitespace(line);
  size_t sp = rest.find_first_of(" \t");
  std::string interp(rest.substr(0, sp));
  std::string arg;
  if (sp != absl::string_view::npos) arg = std::string(absl::StripAsciiWhitespace(rest.substr(sp)));
  if (interp.empty()) return std::nullopt;
  return std::make_pair(interp, arg);
}

// ---------------------------------------------------------------------------
// Secure-execution mode (AT_SECURE): the loader then ignores LD_PRELOAD
// entries containing a '/' and loads others only if they are set-user-ID.

std::optional<std::string> SecureExecution(const std::string& path) {
  // The new image's real ids are ours; its effective ids become the file's
  // owner/group for set-ID files (unless the file system is mounted nosuid).
  if (getuid() != geteuid() || getgid() != getegid()) {
    return std::string("would inherit different real and effective ids from rdsrun's caller");
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  struct statvfs vfs;
  if (statvfs(path.c_str(), &vfs) == 0 && (vfs.f_flag & ST_NOSUID)) return std::nullopt;
  if ((st.st_mode & S_ISUID) && st.st_uid != getuid()) {
    return absl::StrFormat("is set-user-ID (owner uid %d)", st.st_uid);
  }
  // Set-group-ID counts only with group execute permission.
  if ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) && st.st_gid != getgid()) {
    return absl::StrFormat("is set-group-ID (group gid %d)", st.st_gid);
  }
  // File capabilities make the execution secure unless the real uid is root.
  char cap[64];
  if (getuid() != 0 && getxattr(path.c_str(), "security.capability", cap, sizeof(cap)) > 0) {
    return std::string("has file capabilities (security.capability)");
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Asking the program's own loader: `<interp> --list <program>` with the new
// LD_PRELOAD maps nothing into us and runs nothing of the program.

struct LoaderAnswer {
  bool ran = false;
  bool loads = false;
  std::string detail;
};

LoaderAnswer AskLoader(const std::string& interp, const std::string& program,
                       const std::string& preload, const std::string& lib) {
  LoaderAnswer a;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return a;
  pid_t pid = fork();
  if (pid < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return a;
  }
  if (pid == 0) {
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    setenv("LD_PRELOAD", preload.c_str(), 1);
    unsetenv("LD_TRACE_LOADED_OBJECTS");
    execl(interp.c_str(), interp.c_str(), "--list", program.c_str(), static_cast<char*>(nullptr));
    _exit(126);
  }
  close(pipefd[1]);
  std::string out;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed_ms >= 5000) {
      kill(pid, SIGKILL);
      break;
    }
    struct pollfd p = {pipefd[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(5000 - elapsed_ms)) <= 0) continue;
    char buf[4096];
    ssize_t n = read(pipefd[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < (1u << 20)) out.append(buf, static_cast<size_t>(n));
  }
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 126) {
    a.detail = "the loader could not be asked";
    return a;
  }
  a.ran = true;
  std::vector<std::string> problems;
  bool listed = false;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    absl::string_view t = absl::StripAsciiWhitespace(line);
    if (t.empty()) continue;
    if (absl::StrContains(t, "not found") || absl::StrContains(t, "cannot be preloaded") ||
        absl::StartsWith(t, "ERROR") || absl::StrContains(t, "error while loading")) {
      problems.emplace_back(t);
    }
    if (absl::StartsWith(t, lib + " (") || absl::StrContains(t, "=> " + lib + " (")) listed = true;
  }
  a.loads = listed && problems.empty();
  if (!a.loads) {
    a.detail = problems.empty() ? "the loader does not list it" : absl::StrJoin(problems, "; ");
  }
  return a;
}

bool IsGlibcLoader(const std::string& interp) {
  std::string base = interp.substr(interp.rfind('/') + 1);
  return absl::StartsWith(base, "ld-linux") || absl::StartsWith(base, "ld64.so") ||
         absl::StartsWith(base, "ld.so");
}

// ---------------------------------------------------------------------------
// The verdict: "" when the shim will load into `program`, or why not.

std::string Verdict(const std::string& command, const std::string& lib, const ElfInfo& lib_elf,
                    const std::string& preload) {
  std::string program = command;
  std::string chain;  // "script -> interpreter", for messages
  for (int depth = 0; depth < 4; ++depth) {
    auto sb = Shebang(program);
    if (!sb) break;
    std::string interp = sb->first;
    // `#!/usr/bin/env [-S] NAME`: env runs NAME (it keeps LD_PRELOAD).
    if (interp.substr(interp.rfind('/') + 1) == "env") {
      if (std::optional<std::string> s = SecureExecution(interp)) {
        return absl::StrFormat("%s %s: the loader ignores LD_PRELOAD for it", interp, *s);
      }
      std::string name;
      for (absl::string_view w : absl::StrSplit(sb->second, ' ', absl::SkipEmpty())) {
        if (w.empty() || w[0] == '-' || absl::StrContains(w, "=")) continue;
        name = std::string(w);
        break;
      }
      if (name.empty()) break;
      std::optional<std::string> resolved = ResolveCommand(name);
      if (!resolved) return "";  // env will fail on its own: nothing to say about the shim
      interp = *resolved;
    }
    absl::StrAppend(&chain, program, " is a script for ", interp, "; ");
    program = interp;
  }
  Verbose(absl::StrCat("checking ", chain, program));
  if (std::optional<std::string> s = SecureExecution(program)) {
    return absl::StrFormat(
        "%s%s %s: it runs in secure-execution mode, where the dynamic loader ignores LD_PRELOAD "
        "paths containing '/' (run it without the set-ID bit or capabilities, or as its owner)",
        chain, program, *s);
  }
  ElfInfo elf = InspectElf(program);
  if (!elf.is_elf) {
    Verbose(absl::StrCat(program, " is not an ELF file: not checked further"));
    return "";
  }
  if (!elf.problem.empty()) return absl::StrFormat("%s%s: %s", chain, program, elf.problem);
  if (elf.interp.empty()) {
    if (elf.go) {
      return absl::StrFormat(
          "%s%s is a statically linked Go program: there is no dynamic loader to load the "
          "shim, and Go makes system calls directly instead of through libc",
          chain, program);
    }
    return absl::StrFormat(
        "%s%s is statically linked: no dynamic loader runs, so LD_PRELOAD is never read and the "
        "shim cannot be loaded (link the program dynamically)",
        chain, program);
  }
  if (elf.go) {
    return absl::StrFormat(
        "%s%s is a Go program: Go's runtime makes socket system calls directly, not through "
        "libc, so the shim would be loaded but never called",
        chain, program);
  }
  if (lib_elf.is_elf && (elf.elf_class != lib_elf.elf_class || elf.machine != lib_elf.machine)) {
    return absl::StrFormat(
        "%s%s is a %s program for ELF machine %d; %s is %s for machine %d: the loader cannot "
        "load it (build rds-preload for that architecture)",
        chain, program, ClassName(elf.elf_class), elf.machine, lib, ClassName(lib_elf.elf_class),
        lib_elf.machine);
  }
  if (!IsGlibcLoader(elf.interp)) {
    Verbose(absl::StrCat(program, "'s loader ", elf.interp,
                         " is not glibc's: the shim (built against glibc) may not load"));
    return "";
  }
  LoaderAnswer a = AskLoader(elf.interp, program, preload, lib);
  if (!a.ran) {
    Verbose(absl::StrCat("could not ask ", elf.interp, ": ", a.detail));
    return "";
  }
  if (!a.loads) {
    return absl::StrFormat("%s%s: its loader %s would not load %s: %s", chain, program,
                           elf.interp, lib, a.detail);
  }
  Verbose(absl::StrCat(elf.interp, " --list ", program, ": loads ", lib));
  return "";
}

// LD_PRELOAD entries are separated by ':' or ' '; ours goes last (after a
// sanitizer runtime or another interposer the user already preloads), once.
std::string NewPreload(const char* existing, const std::string& lib) {
  std::vector<std::string> entries;
  if (existing) {
    for (absl::string_view e : absl::StrSplit(existing, absl::ByAnyChar(": "), absl::SkipEmpty())) {
      std::string entry(e);
      std::optional<std::string> real = RealPath(entry);
      if (real && *real == lib) continue;
      entries.push_back(entry);
    }
  }
  entries.push_back(lib);
  return absl::StrJoin(entries, ":");
}

// Splits argv into rdsrun's own flags (`own`: argv[0], then each flag and
// the value of `--lib PATH`; `options`: the flags alone) and the command (the
// first argument that is not a flag, or everything after "--").
void SplitArgs(int argc, char** argv, std::vector<char*>* own, std::vector<std::string>* options,
               std::vector<char*>* command) {
  own->push_back(argv[0]);
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;
    own->push_back(argv[i]);
    options->push_back(a);
    std::string name = a.substr(a.find_first_not_of('-'));
    if ((name == "lib") && i + 1 < argc) own->push_back(argv[++i]);
  }
  for (; i < argc; ++i) command->push_back(argv[i]);
}

}  // namespace

int main(int argc, char** argv) {
  const rds::tools::ToolHelp help = {
      "rdsrun",
      "usage: rdsrun [--lib PATH] [--check] [--force] [--verbose] [--] CMD [ARG...]",
      "Runs CMD with rds-preload (LD_PRELOAD=librds_preload.so), after checking that the shim\n"
      "will really be loaded into it. Options after CMD are CMD's.",
      rds::tools::AbslToolOptions(/*dashes=*/false),
      "exit status: CMD's; 127 if the shim cannot be loaded into CMD; 126 if CMD cannot be\n"
      "executed; 125 for usage errors. See rdsrun(1).",
  };
  std::vector<char*> own, command;
  std::vector<std::string> options;
  SplitArgs(argc, argv, &own, &options, &command);
  for (const std::string& option : options) {
    if (rds::tools::HelpOrVersion(option, help)) return 0;
    if (rds::tools::UnknownFlag({option})) {
      Say(absl::StrCat("unknown option ", option, " (see --help)"));
      return kExitUsage;
    }
  }
  absl::ParseCommandLine(static_cast<int>(own.size()), own.data());
  g_verbose = absl::GetFlag(FLAGS_verbose);
  if (command.empty()) {
    Say("no command given (usage: rdsrun [--lib PATH] [--] CMD [ARG...]; see --help)");
    return kExitUsage;
  }

  std::vector<std::string> tried;
  std::optional<std::string> lib = FindLibrary(absl::GetFlag(FLAGS_lib), &tried);
  if (!lib) {
    Say(absl::StrCat("cannot find ", kLibName, " (tried ", absl::StrJoin(tried, ", "),
                     "); give its path with --lib"));
    return kExitNoShim;
  }
  ElfInfo lib_elf = InspectElf(*lib);
  if (!lib_elf.is_elf || lib_elf.type != ET_DYN) {
    Say(absl::StrCat(*lib, " is not a shared library"));
    return kExitNoShim;
  }
  std::string preload = NewPreload(getenv("LD_PRELOAD"), *lib);
  Verbose(absl::StrCat("LD_PRELOAD=", preload));

  std::optional<std::string> path = ResolveCommand(command[0]);
  if (!path) {
    Say(absl::StrCat(command[0], ": command not found"));
    return kExitCannotExec;
  }
  if (access(path->c_str(), X_OK) != 0) {
    Say(absl::StrCat(*path, ": ", strerror(errno)));
    return kExitCannotExec;
  }
  std::string why = Verdict(*path, *lib, lib_elf, preload);
  if (!why.empty()) {
    Say(absl::StrCat("the shim cannot be loaded: ", why, "."));
    if (!absl::GetFlag(FLAGS_force) || absl::GetFlag(FLAGS_check)) return kExitNoShim;
    Say("--force: running it anyway, without RDS support");
  } else if (absl::GetFlag(FLAGS_check)) {
    printf("ok: %s will run with %s\n", path->c_str(), lib->c_str());
    return 0;
  }

  setenv("LD_PRELOAD", preload.c_str(), 1);
  command.push_back(nullptr);
  execv(path->c_str(), command.data());
  int err = errno;
  if (err == ENOEXEC) {
    // As execvp: a file without #! is a shell script.
    std::vector<char*> sh = {const_cast<char*>("/bin/sh"), const_cast<char*>(path->c_str())};
    sh.insert(sh.end(), command.begin() + 1, command.end());
    execv("/bin/sh", sh.data());
  }
  Say(absl::StrCat("cannot execute ", *path, ": ", strerror(err)));
  return kExitCannotExec;
}
