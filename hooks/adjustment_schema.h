#pragma once

// The Adjustment schema: one row per field of Adjustment, the single place
// that says what the field is and everything derived from it — emptiness,
// which fields are resources, the merge with owners and conflict messages,
// where it lands in the CRI request, its crihook.hook.v1.Adjustment wire
// field (both directions, with the checks), its Koordinator mapping and how
// `crihookctl explain` shows it. adjustment.cc, apply.cc, wire.cc, the
// Koordinator translation and explain.cc loop over the rows; none of them
// names a field.
//
// Adding a field: a member of Adjustment and an enumerator of Field
// (adjustment.h), a field in crihook.hook.v1.Adjustment
// (cri-api/crihook_hook_v1.proto), one row in adjustment_schema.cc, tests.
// test/hooks/adjustment_schema_test.cc checks that every Field has a row and
// that every wire field belongs to one.

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "cri-api/crihook_hook_v1.pb.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/adjustment.h"

namespace crihook {

// How a field merges.
enum class FieldKind {
  kScalar,     // one value; two hooks setting different values conflict
  kKeyedList,  // entries keyed (env by name, mounts and devices by container path),
               // each key its own owner; removal (env_remove) shares the key
  kSet,        // names; the same name from two hooks is one entry, never a conflict
  kMap,        // key -> value, each key its own owner; some with a removal list
};

// Where in the CRI requests a field lands (a bit set).
enum Lands : unsigned {
  kInContainer = 1,  // CreateContainer's ContainerConfig
  kInSandbox = 2,    // RunPodSandbox's PodSandboxConfig (or CreateContainer's sandbox_config)
  kInResources = 4,  // LinuxContainerResources: Create/UpdateContainer, the pod's resources
};

// What `MergedAdjustment::add` gives a row to claim its keys with: the
// owner bookkeeping, the precedence and the conflict message.
class Claims {
 public:
  virtual ~Claims() = default;
  // `hook` claims `key`, whose merged value is `old_value` (shown as
  // "<removed>" when it is kRemoved) and which the hook sets to `value`.
  // Sets `store` when the hook's value is to be stored; FAILED_PRECONDITION
  // naming both hooks, the field and both values on a conflict.
  virtual absl::Status claim(Field field, std::string_view key, const std::string& old_value,
                             const std::string& value, bool& store) = 0;
};
// The value of a key a hook removed, in conflict messages.
inline constexpr std::string_view kRemoved = "<removed>";

// One field's row. The rows are immutable, built once, shared by all threads.
class FieldSpec {
 public:
  FieldSpec(Field field, std::string_view name, FieldKind kind, unsigned lands,
            std::string_view cri, std::string_view koordinator)
      : field(field), name(name), kind(kind), lands(lands), cri(cri), koordinator(koordinator) {}
  virtual ~FieldSpec() = default;

  const Field field;
  // The owner spelling's prefix and the word in conflict messages ("env",
  // "cpuset_cpus", "annotation").
  const std::string_view name;
  const FieldKind kind;
  const unsigned lands;  // Lands bits
  // Its place in the CRI request, for people ("ContainerConfig.envs").
  const std::string_view cri;
  // Its Koordinator runtime.v1alpha1 mapping, for people; empty when it has none.
  const std::string_view koordinator;

  // A resource survives kubelet's UpdateContainerResources (applied again).
  bool resource() const { return (lands & kInResources) != 0; }

  // Whether `a` has an opinion on this field.
  virtual bool present(const Adjustment& a) const = 0;
  // This field of `from` over that of `to` (key by key for maps).
  virtual void overlay(const Adjustment& from, Adjustment& to) const = 0;
  // Merges this field of `from` into `into`, claiming every key.
  virtual absl::Status merge(const Adjustment& from, Adjustment& into, Claims& claims) const = 0;

  // Its wire fields: the names in crihook.hook.v1.Adjustment (bounds and
  // the schema test), and the conversions. fromWire checks what it copies;
  // `bad(field, why)` makes the INVALID_ARGUMENT naming the wire field.
  virtual std::vector<std::string_view> wireFields() const = 0;
  virtual void toWire(const Adjustment& a, hook::v1::Adjustment& w) const = 0;
  using Bad = std::function<absl::Status(std::string_view field, std::string_view why)>;
  virtual absl::Status fromWire(const hook::v1::Adjustment& w, Adjustment& a,
                                const Bad& bad) const = 0;

  // Applies this field where it lands (nothing where it does not). The
  // resource fields land through applyToResources only (apply.cc gives them
  // the container's, the pod's or the update's LinuxContainerResources).
  // `sandbox` is the sandbox config a CreateContainer request carries.
  virtual void applyToContainer(const Adjustment&, runtime::v1::ContainerConfig&,
                                runtime::v1::PodSandboxConfig* /*sandbox*/) const {}
  virtual void applyToSandbox(const Adjustment&, runtime::v1::PodSandboxConfig&) const {}
  virtual void applyToResources(const Adjustment&, runtime::v1::LinuxContainerResources&) const {}

  // Koordinator: what an answer's container_resources decides for this field
  // (only a value that differs from what was sent; koord-runtime-proxy's
  // rules). Nothing for fields Koordinator's resources do not carry.
  virtual void takeKoordinatorResources(const runtime::v1::LinuxContainerResources& /*sent*/,
                                        const runtime::v1::LinuxContainerResources& /*answer*/,
                                        Adjustment& /*a*/) const {}

  // One line per entry for `crihookctl explain` ("set env A=1"), with the key
  // its owner is recorded under.
  using Line = std::function<void(const std::string& what, const FieldKey& key)>;
  virtual void explain(const Adjustment& a, const Line& line) const = 0;
};

// Every row, in merge order (which is also explain's order).
std::span<const FieldSpec* const> adjustmentSchema();
// The row of `field`.
const FieldSpec& fieldSpec(Field field);

}  // namespace crihook
