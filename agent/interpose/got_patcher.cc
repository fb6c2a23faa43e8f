#include "agent/interpose/got_patcher.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace profagent {

struct MappedRange {
  uintptr_t start;
  uintptr_t end;
  int prot;
};

// Where an object lies in memory, from its program headers.
struct ObjectLayout {
  std::vector<MappedRange> loads;
  uintptr_t dynamic = 0;
  size_t dynamic_size = 0;
  bool found = false;

  // Inside one of its segments; with `prot`, one mapped with at least that access.
  bool Contains(uintptr_t address, size_t size, int prot = 0) const {
    if (address + size < address) return false;
    for (const MappedRange& r : loads) {
      if (address >= r.start && address + size <= r.end && (r.prot & prot) == prot) return true;
    }
    return false;
  }
};

// What an object's dynamic section says: where its symbol, string and relocation tables are.
struct DynamicTables {
  uintptr_t strtab = 0, symtab = 0, rela = 0, jmprel = 0;
  size_t strsz = 0, syment = 0, relasz = 0, relaent = 0, relacount = 0, pltrelsz = 0;
  long pltrel = DT_RELA;
};

namespace {

static_assert(sizeof(void*) == 8, "the GOT patcher reads 64-bit ELF only");

#if defined(__x86_64__)
constexpr bool kArchSupported = true;
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_X86_64_GLOB_DAT;
constexpr uint32_t kAbs64 = R_X86_64_64;
#elif defined(__aarch64__)
constexpr bool kArchSupported = true;
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_AARCH64_GLOB_DAT;
constexpr uint32_t kAbs64 = R_AARCH64_ABS64;
#else
constexpr bool kArchSupported = false;
constexpr uint32_t kJumpSlot = ~0u;
constexpr uint32_t kGlobDat = ~0u;
constexpr uint32_t kAbs64 = ~0u;
#endif

struct Listed {
  std::string name;
  uintptr_t base;
  ObjectLayout layout;
};

struct ListState {
  std::vector<Listed>* out = nullptr;  // nullptr: read the counters only
  unsigned long long adds = 0;
  unsigned long long subs = 0;
  bool counters = false;
};

void ReadLayout(const dl_phdr_info* info, ObjectLayout* layout) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      int prot = ((ph.p_flags & PF_R) ? PROT_READ : 0) | ((ph.p_flags & PF_W) ? PROT_WRITE : 0) |
                 ((ph.p_flags & PF_X) ? PROT_EXEC : 0);
      layout->loads.push_back({start, start + ph.p_memsz, prot});
    } else if (ph.p_type == PT_DYNAMIC) {
      layout->dynamic = start;
      layout->dynamic_size = ph.p_memsz;
    }
  }
  layout->found = true;
}

// One pass over the loaded objects: names, bases and program headers (read while the loader's
// lock is held; used later only for an object we then hold open and find at the same base).
int ListCallback(dl_phdr_info* info, size_t size, void* data) {
  auto* state = static_cast<ListState*>(data);
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    state->adds = info->dlpi_adds;
    state->subs = info->dlpi_subs;
    state->counters = true;
  }
  if (state->out == nullptr) return 1;  // the counters are the same in every entry
  state->out->push_back({info->dlpi_name ? info->dlpi_name : "", info->dlpi_addr, {}});
  ReadLayout(info, &state->out->back().layout);
  return 0;
}

// The loader rewrites some dynamic entries in place to absolute addresses (glibc on x86-64 and
// aarch64), others are left as in the file (the vDSO, musl): accept either, inside the object.
uintptr_t ObjectPointer(const ObjectLayout& layout, uintptr_t base, uintptr_t value) {
  if (layout.Contains(value, 1)) return value;
  if (layout.Contains(base + value, 1)) return base + value;
  return 0;
}

// Reads the dynamic section into *t; false when it does not lie in the object's readable pages.
bool ReadDynamic(const ObjectLayout& layout, uintptr_t base, DynamicTables* t) {
  if (!layout.Contains(layout.dynamic, layout.dynamic_size, PROT_READ)) return false;
  const auto* dyn = reinterpret_cast<const ElfW(Dyn)*>(layout.dynamic);
  size_t entries = layout.dynamic_size / sizeof(ElfW(Dyn));
  for (size_t i = 0; i < entries && dyn[i].d_tag != DT_NULL; ++i) {
    uintptr_t v = dyn[i].d_un.d_val;
    switch (dyn[i].d_tag) {
      case DT_STRTAB:
        t->strtab = ObjectPointer(layout, base, v);
        break;
      case DT_STRSZ:
        t->strsz = v;
        break;
      case DT_SYMTAB:
        t->symtab = ObjectPointer(layout, base, v);
        break;
      case DT_SYMENT:
        t->syment = v;
        break;
      case DT_RELA:
        t->rela = ObjectPointer(layout, base, v);
        break;
      case DT_RELASZ:
        t->relasz = v;
        break;
      case DT_RELAENT:
        t->relaent = v;
        break;
      case DT_RELACOUNT:
        t->relacount = v;
        break;
      case DT_JMPREL:
        t->jmprel = ObjectPointer(layout, base, v);
        break;
      case DT_PLTRELSZ:
        t->pltrelsz = v;
        break;
      case DT_PLTREL:
        t->pltrel = static_cast<long>(v);
        break;
      default:
        break;
    }
  }
  return true;
}

std::vector<MappedRange> ReadMaps() {
  std::vector<MappedRange> maps;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return maps;
  std::string text;
  char buf[16384];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    char* end = nullptr;
    uintptr_t start = std::strtoull(line.c_str(), &end, 16);
    if (end == nullptr || *end != '-') continue;
    uintptr_t stop = std::strtoull(end + 1, &end, 16);
    if (end == nullptr || *end != ' ' || std::strlen(end) < 5) continue;
    int prot = (end[1] == 'r' ? PROT_READ : 0) | (end[2] == 'w' ? PROT_WRITE : 0) |
               (end[3] == 'x' ? PROT_EXEC : 0);
    maps.push_back({start, stop, prot});
  }
  return maps;
}

// One aligned 8-byte store, so a thread calling through the slot sees the old or the new target.
// A read-only page (RELRO) is made writable for the store and given its protection back.
bool WriteSlot(void** slot, void* value, const std::vector<MappedRange>& maps, std::string* error) {
  auto address = reinterpret_cast<uintptr_t>(slot);
  const MappedRange* region = nullptr;
  for (const MappedRange& r : maps) {
    if (address >= r.start && address + sizeof(void*) <= r.end) region = &r;
  }
  if (region == nullptr) {
    *error = "its GOT is not in /proc/self/maps";
    return false;
  }
  if ((region->prot & PROT_EXEC) || !(region->prot & PROT_READ)) {
    *error = "its GOT lies in a page that is executable or not readable";
    return false;
  }
  if (region->prot & PROT_WRITE) {
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    return true;
  }
  auto page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* page = reinterpret_cast<void*>(address & ~(page_size - 1));
  if (mprotect(page, page_size, region->prot | PROT_WRITE) != 0) {
    *error = std::string("cannot make its RELRO page writable: ") + std::strerror(errno);
    return false;
  }
  __atomic_store_n(slot, value, __ATOMIC_RELEASE);
  mprotect(page, page_size, region->prot);
  return true;
}

std::string Describe(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
    const char* slash = std::strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
  }
  return "an unknown address";
}

std::string MainProgramPath() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "the main program";
  path[n] = '\0';
  return path;
}

// Keeps an object loaded while we read and write its memory; waits for a dlopen in progress.
class ObjectHandle {
 public:
  ObjectHandle(const std::string& name, uintptr_t base) {
    handle_ = dlopen(name.empty() ? nullptr : name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (handle_ == nullptr) return;
    link_map* map = nullptr;
    if (dlinfo(handle_, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_addr != base) {
      dlclose(handle_);
      handle_ = nullptr;
    }
  }
  ~ObjectHandle() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  ObjectHandle(const ObjectHandle&) = delete;
  ObjectHandle& operator=(const ObjectHandle&) = delete;
  bool ok() const { return handle_ != nullptr; }

 private:
  void* handle_ = nullptr;
};

}  // namespace

GotPatcher::GotPatcher(std::vector<ImportHook> hooks, std::vector<const void*> never_patch,
                       std::vector<std::string> never_patch_names)
    : hooks_(std::move(hooks)),
      never_patch_(std::move(never_patch)),
      never_patch_names_(std::move(never_patch_names)) {}

void GotPatcher::Scan() {
  std::lock_guard<std::mutex> lock(mutex_);
  ScanLocked(false);
}

void GotPatcher::TryScan() {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (lock.owns_lock()) ScanLocked(false);
}

void GotPatcher::ScanLocked(bool force_verify) {
  if (!kArchSupported) return;
  ListState quick;
  dl_iterate_phdr(&ListCallback, &quick);
  bool changed = !quick.counters || quick.adds != last_adds_ || quick.subs != last_subs_;
  ++scans_;
  if (!changed) {
    // Nothing loaded or unloaded: now and then make sure no patched slot was written back.
    if (force_verify || scans_ % 8 == 0) {
      for (Object& object : objects_) {
        if (!object.slots.empty()) Verify(&object);
      }
    }
    return;
  }
  std::vector<Listed> listed;
  ListState full;
  full.out = &listed;
  dl_iterate_phdr(&ListCallback, &full);

  // Forget objects that were unloaded (their slots went with them).
  std::vector<Object> kept;
  for (Object& object : objects_) {
    bool present = false;
    for (const Listed& l : listed) present |= l.name == object.name && l.base == object.base;
    if (present) {
      kept.push_back(std::move(object));
    } else if (object.imports_hooks) {
      ++generation_;
    }
  }
  objects_ = std::move(kept);

  for (const Listed& l : listed) {
    bool known = false;
    for (Object& object : objects_) {
      if (object.name == l.name && object.base == l.base) {
        known = true;
        if (!object.slots.empty()) Verify(&object);
      }
    }
    if (known) continue;
    Object object;
    object.name = l.name;
    object.base = l.base;
    object.path = l.name.empty() ? MainProgramPath() : l.name;
    if (l.name.rfind("linux-vdso", 0) != 0 && l.name.rfind("linux-gate", 0) != 0) {
      Process(&object, l.layout);
    }
    if (object.imports_hooks) ++generation_;
    objects_.push_back(std::move(object));
  }
  last_adds_ = quick.adds;
  last_subs_ = quick.subs;
}

void GotPatcher::Process(Object* object, const ObjectLayout& layout) {
  ObjectHandle handle(object->name, object->base);
  if (!handle.ok()) return;  // unloaded meanwhile, or in another link-map namespace
  if (!layout.found || layout.dynamic == 0) return;
  if (NeverPatched(*object, layout)) return;
  object->patchable = true;
  for (const MappedRange& r : layout.loads) {
    if ((r.prot & PROT_WRITE) && !(r.prot & PROT_EXEC)) {
      object->writable.push_back({r.start & ~static_cast<uintptr_t>(7), r.end});
    }
  }
  if (!data_hooks_.empty()) ScanDataLocked(object, true);

  // The dynamic section: where the symbol, string and relocation tables are.
  DynamicTables t;
  if (!ReadDynamic(layout, object->base, &t)) return;
  if (t.strtab == 0 || t.symtab == 0 || t.strsz == 0 ||
      !layout.Contains(t.strtab, t.strsz, PROT_READ) ||
      (t.syment != 0 && t.syment != sizeof(ElfW(Sym)))) {
    return;  // nothing it could import by name
  }

  std::vector<PendingSlot> pending;
  // GLOB_DAT and ABS64; the leading RELATIVE ones are skipped
  FindHookedSlots(object, layout, t, t.rela, t.relasz, t.relacount, &pending);
  if (t.pltrel == DT_RELA) {
    FindHookedSlots(object, layout, t, t.jmprel, t.pltrelsz, 0, &pending);  // JUMP_SLOT
  } else if (t.jmprel != 0 && t.pltrelsz != 0) {
    object->problem = "its PLT uses REL relocations (unsupported)";
  }
  if (pending.empty()) return;
  PatchSlots(object, layout, pending);
}

bool GotPatcher::NeverPatched(const Object& object, const ObjectLayout& layout) const {
  for (const void* address : never_patch_) {
    if (layout.Contains(reinterpret_cast<uintptr_t>(address), 1)) return true;
  }
  const size_t slash = object.name.rfind('/');
  const char* basename = object.name.c_str() + (slash == std::string::npos ? 0 : slash + 1);
  for (const std::string& prefix : never_patch_names_) {
    if (std::strncmp(basename, prefix.c_str(), prefix.size()) == 0) return true;
  }
  return false;
}

void GotPatcher::FindHookedSlots(Object* object, const ObjectLayout& layout, const DynamicTables& t,
                                 uintptr_t table, size_t bytes, size_t skip,
                                 std::vector<PendingSlot>* pending) const {
  if (table == 0 || bytes == 0) return;
  if (t.relaent != 0 && t.relaent != sizeof(ElfW(Rela))) {
    object->problem = "unexpected relocation entry size";
    return;
  }
  if (!layout.Contains(table, bytes, PROT_READ)) {
    object->problem = "its relocation table lies outside the object";
    return;
  }
  const uintptr_t base = object->base;
  const auto* r = reinterpret_cast<const ElfW(Rela)*>(table);
  size_t count = bytes / sizeof(ElfW(Rela));
  for (size_t i = skip < count ? skip : count; i < count; ++i) {
    uint32_t type = static_cast<uint32_t>(ELF64_R_TYPE(r[i].r_info));
    if (type != kJumpSlot && type != kGlobDat && type != kAbs64) continue;
    if (type == kAbs64 && r[i].r_addend != 0) continue;  // a pointer into a function, not to it
    size_t index = ELF64_R_SYM(r[i].r_info);
    if (index == 0) continue;
    uintptr_t sym_address = t.symtab + index * sizeof(ElfW(Sym));
    if (!layout.Contains(sym_address, sizeof(ElfW(Sym)), PROT_READ)) continue;
    const auto* sym = reinterpret_cast<const ElfW(Sym)*>(sym_address);
    if (sym->st_shndx != SHN_UNDEF || sym->st_name >= t.strsz) continue;  // not an import
    const char* name = reinterpret_cast<const char*>(t.strtab + sym->st_name);
    size_t room = t.strsz - sym->st_name;
    if (strnlen(name, room) == room) continue;
    for (size_t h = 0; h < hooks_.size(); ++h) {
      if (name[0] != hooks_[h].name[0] || std::strcmp(name, hooks_[h].name) != 0) continue;
      object->imports_hooks = true;
      uintptr_t slot = base + r[i].r_offset;
      if (slot % sizeof(void*) != 0 ||
          !layout.Contains(slot, sizeof(void*), PROT_READ | PROT_WRITE)) {
        object->problem = std::string("the slot of ") + name + " lies outside the object";
        break;
      }
      pending->push_back({reinterpret_cast<void**>(slot), h});
      break;
    }
  }
}

void GotPatcher::PatchSlots(Object* object, const ObjectLayout& layout,
                            const std::vector<PendingSlot>& pending) {
  std::vector<MappedRange> maps;
  for (const PendingSlot& p : pending) {
    const ImportHook& hook = hooks_[p.hook];
    void* current = __atomic_load_n(p.slot, __ATOMIC_ACQUIRE);
    if (current == hook.replacement) {
      object->slots.push_back({p.slot, hook.original, p.hook});
      continue;
    }
    if (current == nullptr) continue;  // an unresolved weak import: nothing calls through it
    // The real function, or (lazy binding, not called yet) the object's own PLT stub.
    bool ours_to_patch =
        current == hook.original || layout.Contains(reinterpret_cast<uintptr_t>(current), 1);
    if (!ours_to_patch) {
      object->problem = std::string(hook.name) + " already leads to " + Describe(current) +
                        " (another interposer?): left alone";
      continue;
    }
    if (maps.empty()) maps = ReadMaps();
    std::string error;
    if (WriteSlot(p.slot, hook.replacement, maps, &error)) {
      object->slots.push_back({p.slot, current, p.hook});
    } else {
      object->problem = error;
    }
  }
}

void GotPatcher::Verify(Object* object) {
  ObjectHandle handle(object->name, object->base);
  if (!handle.ok()) return;
  std::vector<MappedRange> maps;
  for (Slot& slot : object->slots) {
    const ImportHook& hook = hooks_[slot.hook];
    void* current = __atomic_load_n(slot.address, __ATOMIC_ACQUIRE);
    if (current != hook.original) continue;
    // A lazy-binding resolver that was resolving this slot while we patched it wrote the real
    // function back: patch again.
    if (maps.empty()) maps = ReadMaps();
    std::string error;
    if (!WriteSlot(slot.address, hook.replacement, maps, &error)) object->problem = error;
  }
}

void GotPatcher::RestoreAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<MappedRange> maps = ReadMaps();
  for (Object& object : objects_) {
    if (object.slots.empty() && object.data_slots.empty()) continue;
    ObjectHandle handle(object.name, object.base);
    if (!handle.ok()) continue;
    for (const Slot& slot : object.slots) {
      if (__atomic_load_n(slot.address, __ATOMIC_ACQUIRE) != hooks_[slot.hook].replacement)
        continue;
      std::string error;
      WriteSlot(slot.address, slot.before, maps, &error);
    }
    for (const DataSlot& slot : object.data_slots) {
      std::string error;
      for (const DataHook& h : data_hooks_) {
        if (h.original == slot.before &&
            __atomic_load_n(slot.address, __ATOMIC_ACQUIRE) == h.replacement) {
          WriteSlot(slot.address, slot.before, maps, &error);
        }
      }
    }
    object.slots.clear();
    object.data_slots.clear();
    ++generation_;
  }
  // Objects are looked at afresh at the next Scan.
  objects_.clear();
  last_adds_ = last_subs_ = ~0ull;
}

void GotPatcher::SetDataHooks(std::vector<DataHook> hooks) {
  std::lock_guard<std::mutex> lock(mutex_);
  data_hooks_ = std::move(hooks);
  data_low_ = UINTPTR_MAX;
  data_high_ = 0;
  for (const DataHook& h : data_hooks_) {
    data_low_ = std::min(data_low_, reinterpret_cast<uintptr_t>(h.original));
    data_high_ = std::max(data_high_, reinterpret_cast<uintptr_t>(h.original));
  }
}

void GotPatcher::ScanData(bool everything) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Object& object : objects_) {
    if (!object.patchable || (!everything && object.hot.empty())) continue;
    ObjectHandle handle(object.name, object.base);
    if (handle.ok()) ScanDataLocked(&object, everything);
  }
}

// The object is held open by the caller. Reads its writable segments word by word (or only the
// pages around earlier finds) and points each word equal to an original at its replacement.
// Reading another object's data whole is the point: not a bug for the sanitizers to report (an
// ASan build's globals have redzones between them).
__attribute__((no_sanitize("address", "thread"))) void GotPatcher::ScanDataLocked(Object* object,
                                                                                  bool everything) {
  if (data_hooks_.empty()) return;
  constexpr uintptr_t kHotMargin = 64 * 1024;
  std::vector<Range> ranges;
  if (everything) {
    ranges = object->writable;
  } else {
    for (const Range& h : object->hot) {
      for (const Range& w : object->writable) {
        uintptr_t start = std::max(w.start, h.start), end = std::min(w.end, h.end);
        if (start < end) ranges.push_back({start, end});
      }
    }
  }
  std::vector<MappedRange> maps;
  for (const Range& r : ranges) {
    for (uintptr_t a = r.start; a + sizeof(void*) <= r.end; a += sizeof(void*)) {
      auto** word = reinterpret_cast<void**>(a);
      // A volatile load: one aligned 8-byte read, whole whatever the owner writes meanwhile. (An
      // atomic one is the same instruction, but clang's TSan instruments atomics even here, and
      // the owner's own plain writes to its data would then be reported as races with us.)
      const uintptr_t value = reinterpret_cast<uintptr_t>(*reinterpret_cast<void* volatile*>(a));
      if (value < data_low_ || value > data_high_) continue;
      for (const DataHook& h : data_hooks_) {
        if (reinterpret_cast<uintptr_t>(h.original) != value) continue;
        if (maps.empty()) maps = ReadMaps();
        std::string error;
        if (WriteSlot(word, h.replacement, maps, &error)) {
          object->data_slots.push_back({word, h.original});
          const uintptr_t lo = a > kHotMargin ? a - kHotMargin : 0;
          bool known = false;
          for (const Range& hot : object->hot) known |= a >= hot.start && a < hot.end;
          if (!known) object->hot.push_back({lo & ~static_cast<uintptr_t>(7), a + kHotMargin});
          ++generation_;
        }
        break;
      }
    }
  }
}

size_t GotPatcher::data_slots() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const Object& object : objects_) n += object.data_slots.size();
  return n;
}

std::vector<GotPatcher::ObjectReport> GotPatcher::Report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ObjectReport> report;
  for (const Object& object : objects_) {
    if (!object.imports_hooks && object.data_slots.empty()) continue;
    ObjectReport r{object.path,
                   static_cast<uint32_t>(object.slots.size()),
                   object.problem,
                   {},
                   static_cast<uint32_t>(object.data_slots.size())};
    for (const Slot& slot : object.slots) {
      const std::string name = hooks_[slot.hook].name;
      if (std::find(r.hooked.begin(), r.hooked.end(), name) == r.hooked.end()) {
        r.hooked.push_back(name);
      }
    }
    report.push_back(std::move(r));
  }
  return report;
}

size_t GotPatcher::objects() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return objects_.size();
}

uint64_t GotPatcher::generation() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

}  // namespace profagent
