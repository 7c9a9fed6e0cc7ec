#include "hooks/module/module_hook.h"

#include <dlfcn.h>
#include <elf.h>
#include <google/protobuf/util/json_util.h>

#include <cstring>
#include <fstream>

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/read_file.h"
#include "base/text.h"
#include "hooks/wire.h"

namespace crihook {
namespace {

static_assert(static_cast<int>(LifecycleMethod::kRunPodSandbox) == CRIHOOK_RUN_POD_SANDBOX &&
                  static_cast<int>(LifecycleMethod::kCreateContainer) == CRIHOOK_CREATE_CONTAINER &&
                  static_cast<int>(LifecycleMethod::kUpdateContainerResources) ==
                      CRIHOOK_UPDATE_CONTAINER_RESOURCES,
              "crihook_module.h's method numbers are LifecycleMethod's");
static_assert(CRIHOOK_STAGE(CRIHOOK_CREATE_CONTAINER, CRIHOOK_POST) ==
              stageBit(LifecycleMethod::kCreateContainer, Phase::kPost));

#if defined(__x86_64__)
constexpr int kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kMachine = EM_AARCH64;
#else
#error "crihook modules: add this machine's ELF e_machine"
#endif

constexpr const char* kFunctions[] = {"crihook_module_init", "crihook_module_run",
                                      "crihook_module_free", "crihook_module_fini"};
constexpr size_t kMaxModuleBytes = 256u << 20;

using InitFn = int (*)(const char*, size_t, void**, char**);
using RunFn = int (*)(void*, const char*, size_t, char**, size_t*, char**);
using FreeFn = void (*)(void*);
using FiniFn = void (*)(void*);

// The bytes of a file, read whole (a module is small); a regular file only.
absl::StatusOr<std::string> readFile(const std::string& path) {
  auto bytes = readRegularFile(path, kMaxModuleBytes);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code() == absl::StatusCode::kNotFound
                            ? absl::StatusCode::kNotFound
                            : absl::StatusCode::kFailedPrecondition,
                        cat("module ", path, ": cannot be read: ", sv(bytes.status().message())));
  }
  return bytes;
}

template <typename T>
const T* at(const std::string& file, uint64_t offset) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) return nullptr;
  return reinterpret_cast<const T*>(file.data() + offset);
}

class ModuleHook final : public Hook {
 public:
  ModuleHook(std::string name, LoadedModule module) : name_(std::move(name)), m_(module) {}
  ~ModuleHook() override { m_.fini(m_.instance); }

  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return (m_.info.stages & stageBit(m, p)) != 0;
  }
  // Never on the caller's thread, CRIHOOK_MODULE_INLINE or not: a module
  // that loops would hold an event loop and every call on it (Version
  // included). On its workers, it costs a worker and its calls' timeouts.
  bool runsInline() const override { return false; }

  HookDecision run(const HookInput& input) override {
    const std::string request = moduleRequest(input);
    char* reply = nullptr;
    size_t reply_len = 0;
    char* error = nullptr;
    const int rc = m_.run(m_.instance, request.data(), request.size(), &reply, &reply_len, &error);
    std::string reply_text = reply ? std::string(reply, reply_len) : std::string();
    std::string error_text = error ? std::string(error) : std::string();
    if (reply) m_.free(reply);
    if (error) m_.free(error);
    return moduleDecision(name_, input.phase, rc, reply_text, error_text);
  }

 private:
  std::string name_;
  LoadedModule m_;
};

}  // namespace

absl::StatusOr<crihook_module_info> readModuleInfo(const std::string& path) {
  auto file = readFile(path);
  if (!file.ok()) return file.status();
  auto bad = [&](std::string_view why) {
    return absl::FailedPreconditionError(cat("module ", path, ": ", why));
  };
  const auto* eh = at<Elf64_Ehdr>(*file, 0);
  if (eh == nullptr || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
    return bad("not an ELF file");
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
      eh->e_machine != kMachine)
    return bad("built for another machine");
  if (eh->e_type != ET_DYN) return bad("not a shared object");
  if (eh->e_shentsize != sizeof(Elf64_Shdr)) return bad("unexpected section header size");
  auto section = [&](size_t i) {
    return at<Elf64_Shdr>(*file, eh->e_shoff + i * sizeof(Elf64_Shdr));
  };

  const Elf64_Shdr* dynsym = nullptr;
  for (size_t i = 0; i < eh->e_shnum; ++i) {
    const Elf64_Shdr* sh = section(i);
    if (sh == nullptr) return bad("truncated section headers");
    if (sh->sh_type == SHT_DYNSYM) dynsym = sh;
  }
  if (dynsym == nullptr || dynsym->sh_entsize != sizeof(Elf64_Sym))
    return bad("no dynamic symbol table");
  const Elf64_Shdr* strtab = dynsym->sh_link < eh->e_shnum ? section(dynsym->sh_link) : nullptr;
  if (strtab == nullptr || strtab->sh_offset > file->size() ||
      file->size() - strtab->sh_offset < strtab->sh_size)
    return bad("no dynamic string table");
  std::string_view names(file->data() + strtab->sh_offset, strtab->sh_size);

  const Elf64_Sym* info_sym = nullptr;
  std::vector<std::string_view> functions;
  for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= dynsym->sh_size; off += sizeof(Elf64_Sym)) {
    const auto* sym = at<Elf64_Sym>(*file, dynsym->sh_offset + off);
    if (sym == nullptr) return bad("truncated symbol table");
    if (sym->st_shndx == SHN_UNDEF || sym->st_name >= names.size()) continue;
    std::string_view name = names.substr(sym->st_name);
    name = name.substr(0, name.find('\0'));
    if (name == "crihook_module_info" && ELF64_ST_TYPE(sym->st_info) == STT_OBJECT) info_sym = sym;
    if (ELF64_ST_TYPE(sym->st_info) == STT_FUNC) functions.push_back(name);
  }
  if (info_sym == nullptr) {
    return absl::NotFoundError(cat("module ", path, ": exports no crihook_module_info"));
  }
  for (const char* f : kFunctions) {
    if (std::find(functions.begin(), functions.end(), f) == functions.end())
      return absl::NotFoundError(cat("module ", path, ": exports no ", f));
  }
  if (info_sym->st_size < offsetof(crihook_module_info, info_size) + sizeof(uint32_t))
    return bad("crihook_module_info is too small");
  const Elf64_Shdr* home = info_sym->st_shndx < eh->e_shnum ? section(info_sym->st_shndx) : nullptr;
  if (home == nullptr || home->sh_type == SHT_NOBITS || info_sym->st_value < home->sh_addr)
    return bad("crihook_module_info has no contents in the file");
  const uint64_t offset = home->sh_offset + (info_sym->st_value - home->sh_addr);
  crihook_module_info info{};
  const size_t have = std::min<size_t>(info_sym->st_size, sizeof(info));
  if (offset > file->size() || file->size() - offset < have)
    return bad("truncated crihook_module_info");
  std::memcpy(&info, file->data() + offset, have);

  if (info.abi_version != CRIHOOK_MODULE_ABI_VERSION) {
    return bad(cat("built for module ABI version ", info.abi_version, "; this crihookd speaks ",
                   CRIHOOK_MODULE_ABI_VERSION));
  }
  if (info.info_size != sizeof(crihook_module_info) || info_sym->st_size != sizeof(info))
    return bad(cat("crihook_module_info is ", info.info_size, " bytes; expected ", sizeof(info)));
  if (std::memchr(info.name, '\0', sizeof(info.name)) == nullptr || info.name[0] == '\0')
    return bad("crihook_module_info.name is empty or not NUL-terminated");
  if (std::memchr(info.version, '\0', sizeof(info.version)) == nullptr)
    return bad("crihook_module_info.version is not NUL-terminated");
  if (info.stages == 0 || info.stages >= (uint64_t{1} << (2 * 8)))
    return bad("crihook_module_info.stages names no stage or unknown ones");
  if ((info.flags & ~CRIHOOK_MODULE_INLINE) != 0 || info.reserved != 0)
    return bad("crihook_module_info has unknown flags set");
  return info;
}

absl::StatusOr<LoadedModule> openModule(const std::string& path, const std::string& settings_json) {
  auto info = readModuleInfo(path);
  if (!info.ok()) return info.status();
  // Never closed: a timed-out call may still be running module code.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(cat("module ", path, ": cannot be loaded: ", ::dlerror()));
  }
  auto init = reinterpret_cast<InitFn>(::dlsym(handle, "crihook_module_init"));
  auto run = reinterpret_cast<RunFn>(::dlsym(handle, "crihook_module_run"));
  auto free = reinterpret_cast<FreeFn>(::dlsym(handle, "crihook_module_free"));
  auto fini = reinterpret_cast<FiniFn>(::dlsym(handle, "crihook_module_fini"));
  if (!init || !run || !free || !fini) {
    return absl::NotFoundError(
        cat("module ", path, ": a crihook_module_* function did not resolve"));
  }
  void* instance = nullptr;
  char* error = nullptr;
  if (int rc = init(settings_json.data(), settings_json.size(), &instance, &error); rc != 0) {
    std::string why = error ? error : "no reason given";
    if (error) free(error);
    return absl::InvalidArgumentError(cat("module ", path, ": init failed (", rc, "): ", why));
  }
  return LoadedModule{*info, instance, run, free, fini};
}

absl::StatusOr<std::shared_ptr<Hook>> loadModuleHook(const std::string& name,
                                                     const std::string& path,
                                                     const std::string& settings_json) {
  auto module = openModule(path, settings_json);
  if (!module.ok()) return module.status();
  return std::make_shared<ModuleHook>(name, *module);
}

std::string moduleRequest(const HookInput& input) {
  std::string request;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(hookRequest(input), &request, options);
  return request;
}

HookDecision moduleDecision(const std::string& name, Phase phase, int rc,
                            const std::string& reply_text, const std::string& error_text) {
  if (rc != 0) {
    return HookDecision::error(absl::InternalError(
        cat("module returned ", rc, ": ",
            error_text.empty() ? "no reason given" : boundedMessage(error_text, 1024))));
  }
  // The same bounds as a remote hook's reply: bytes, then nesting before
  // the (recursive) JSON parser runs.
  if (reply_text.size() > kMaxModuleReplyBytes) {
    return HookDecision::error(absl::InvalidArgumentError(
        cat("reply of hook ", name, ": ", reply_text.size(), " bytes, more than the ",
            kMaxModuleReplyBytes, " allowed")));
  }
  if (!jsonNestingWithin(reply_text, kMaxJsonNesting)) {
    return HookDecision::error(absl::InvalidArgumentError(
        cat("reply of hook ", name, ": nested deeper than ", kMaxJsonNesting)));
  }
  hook::v1::HookResponse response;
  if (auto s = google::protobuf::util::JsonStringToMessage(reply_text, &response); !s.ok()) {
    return HookDecision::error(absl::InvalidArgumentError(
        cat("reply of hook ", name,
            ": not a crihook.hook.v1.HookResponse: ", quote(s.message().ToString(), 200))));
  }
  return hookDecision(response, phase, name);
}

}  // namespace crihook
