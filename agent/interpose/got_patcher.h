// Redirects the calls other objects in the process make to chosen functions of one shared library
// (CUPTI) to replacements of ours, by rewriting the GOT slots their dynamic relocations fill in:
// JUMP_SLOT (calls through the PLT), GLOB_DAT (address taken through the GOT) and ABS64 (a
// function pointer stored in data), on x86-64 and aarch64. Nothing is patched inside the objects
// the caller names as never to patch (the agent itself, the library whose functions are hooked).
//
// It fails closed: an object whose dynamic section, relocations or pages are not what is expected
// is left alone and reported, as is a slot that already points somewhere other than the real
// function or the object's own lazy-binding stub (another interposer got there first).
//
// Objects are held open (dlopen RTLD_NOLOAD) while they are patched, which also waits for a
// dlopen in progress on another thread to finish relocating them, so a slot is never written
// while the loader still writes it or before its RELRO protection is applied.
//
// Threads: any, cold paths only (start-up, the agent thread's periodic rescan); one internal mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace profagent {

struct ObjectLayout;   // got_patcher.cc
struct DynamicTables;  // got_patcher.cc

// A function pointer a library keeps in its own writable data (a static CUDA runtime's table of
// driver entry points, filled by cuGetProcAddress before the agent could interpose the lookup).
struct DataHook {
  void* original;     // the value to find, 8-byte aligned, in the object's writable segments
  void* replacement;  // what it becomes
};

struct ImportHook {
  const char* name;   // symbol name, e.g. "cuptiSubscribe"
  void* replacement;  // what the patched slots point to
  void* original;     // the real function (dlsym on the library's handle)
};

class GotPatcher {
 public:
  // One line per object that imports a hooked symbol.
  struct ObjectReport {
    std::string path;
    uint32_t slots = 0;               // slots pointing to our replacements
    std::string problem;              // why some or all of its slots were left alone; "" when none
    std::vector<std::string> hooked;  // the imports that go through a replacement, once each
    uint32_t data_slots = 0;          // words of its own data patched (SetDataHooks)
  };

  // never_patch: addresses inside objects that must keep their own GOT (any address of each);
  // never_patch_names: basename prefixes of more such objects ("libcupti.so").
  GotPatcher(std::vector<ImportHook> hooks, std::vector<const void*> never_patch,
             std::vector<std::string> never_patch_names = {});

  // Patches the objects loaded since the last call (every object at the first call) and checks the
  // slots patched before (a lazy-binding resolver racing the first patch may have written the real
  // address back). Cheap when nothing was loaded or unloaded since the last call.
  void Scan();
  // Scan, unless another thread is scanning now (then it returns at once: a caller that must
  // never wait, like a hook on an application thread).
  void TryScan();

  // Puts every patched slot back to what it held before (tests; a way out if something is wrong).
  void RestoreAll();

  // Beyond the GOT: from now on each Scan also looks through the writable data of every object it
  // may patch for words equal to a hook's original (only in objects seen for the first time, and
  // in the pages around earlier finds, where a table being filled lazily grows), and
  // ScanData(true) through all of it again. Cold: a few ms per 100 MB of writable data.
  void SetDataHooks(std::vector<DataHook> hooks);
  void ScanData(bool everything);
  // Words patched so far (the report and tests).
  size_t data_slots() const;

  std::vector<ObjectReport> Report() const;
  // Changes whenever Report() would change.
  uint64_t generation() const;
  // Objects looked at so far (loaded ones, patched or not).
  size_t objects() const;

 private:
  struct Slot {
    void** address;
    void* before;  // the value found there before the first patch
    size_t hook;
  };
  struct Range {
    uintptr_t start;
    uintptr_t end;
  };
  struct DataSlot {
    void** address;
    void* before;
  };
  struct Object {
    std::string name;  // as the loader knows it ("" = the main program)
    std::string path;  // for reports
    uintptr_t base = 0;
    bool imports_hooks = false;
    std::vector<Slot> slots;
    std::string problem;
    bool patchable = false;       // not one of never_patch
    std::vector<Range> writable;  // its writable segments
    std::vector<Range> hot;       // pages around words found there before
    std::vector<DataSlot> data_slots;
  };

  // A slot found for a hook, to patch.
  struct PendingSlot {
    void** slot;
    size_t hook;
  };

  void ScanLocked(bool force_verify);
  void Process(Object* object, const ObjectLayout& layout);
  // Process's steps. The object is one of never_patch or never_patch_names.
  bool NeverPatched(const Object& object, const ObjectLayout& layout) const;
  // Adds the slots of the hooked imports among the `bytes` of RELA relocations at `table` (the
  // first `skip` left out) to *pending; what cannot be patched goes in object->problem.
  void FindHookedSlots(Object* object, const ObjectLayout& layout, const DynamicTables& tables,
                       uintptr_t table, size_t bytes, size_t skip,
                       std::vector<PendingSlot>* pending) const;
  // Points each slot at its replacement, unless something else than the real function or the
  // object's own PLT stub is there (another interposer): left alone, reported.
  void PatchSlots(Object* object, const ObjectLayout& layout,
                  const std::vector<PendingSlot>& pending);
  void Verify(Object* object);
  void ScanDataLocked(Object* object, bool everything);

  const std::vector<ImportHook> hooks_;
  const std::vector<const void*> never_patch_;
  const std::vector<std::string> never_patch_names_;
  std::vector<DataHook> data_hooks_;        // mutex_
  uintptr_t data_low_ = 0, data_high_ = 0;  // the originals' range, a cheap first test
  mutable std::mutex mutex_;
  std::vector<Object> objects_;  // every object seen, patched or not
  unsigned long long last_adds_ = ~0ull;
  unsigned long long last_subs_ = ~0ull;
  uint64_t generation_ = 0;
  uint32_t scans_ = 0;
};

}  // namespace profagent
