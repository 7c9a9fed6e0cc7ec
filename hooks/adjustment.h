#pragma once

// What a hook decides about a pod or container: a declarative adjustment
// (containerd NRI's ContainerAdjustment is the model). Hooks never edit the
// CRI request; the chain merges their adjustments with ownership recorded
// (MergedAdjustment) and one function applies the result (apply.h).

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace crihook {

struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

struct MountSpec {
  std::string container_path;
  std::string host_path;
  bool readonly = false;
  // CRI MountPropagation: 0 private, 1 host-to-container, 2 bidirectional.
  int propagation = 0;
  bool operator==(const MountSpec&) const = default;
};

struct DeviceSpec {
  std::string container_path;
  std::string host_path;
  std::string permissions = "rw";  // device cgroup letters: r, w, m
  bool operator==(const DeviceSpec&) const = default;
};

// One hook's decision. Every field is optional: empty means "no opinion".
// What each field is, how it merges, where it lands in the CRI request, its
// wire field and how explain shows it is written once, in the schema
// (adjustment_schema.h); a new field is a member here, an enumerator in
// Field, a row there and a field in crihook.hook.v1.Adjustment.
struct Adjustment {
  std::vector<EnvVar> env;  // set, in this order; a name already present keeps its place
  std::vector<std::string> env_remove;
  std::vector<MountSpec> mounts;         // keyed by container_path
  std::vector<DeviceSpec> devices;       // keyed by container_path
  std::vector<std::string> cdi_devices;  // fully qualified CDI names
  std::optional<std::string> cpuset_cpus;
  std::optional<std::string> cpuset_mems;
  std::optional<int64_t> cpu_shares;
  std::optional<int64_t> cpu_quota;
  std::optional<int64_t> cpu_period;
  std::optional<int64_t> memory_limit_bytes;
  std::optional<int64_t> memory_swap_limit_bytes;
  std::optional<int64_t> oom_score_adj;             // -1000 .. 1000
  std::map<std::string, uint64_t> hugepage_limits;  // page size ("2MB") -> bytes
  std::map<std::string, std::string> unified;       // cgroup v2 key -> value
  std::map<std::string, std::string> annotations;
  std::vector<std::string> annotations_remove;
  std::map<std::string, std::string> labels;
  std::vector<std::string> labels_remove;
  std::optional<std::string> cgroup_parent;
  std::vector<int64_t> supplemental_groups;  // group ids added to the container's processes

  bool empty() const;
};

// Every field of Adjustment, as owners and messages name it.
enum class Field : uint8_t {
  kEnv,
  kMount,
  kDevice,
  kCdi,
  kCpusetCpus,
  kCpusetMems,
  kCpuShares,
  kCpuQuota,
  kCpuPeriod,
  kMemoryLimitBytes,
  kMemorySwapLimitBytes,
  kOomScoreAdj,
  kHugepage,
  kUnified,
  kAnnotation,
  kLabel,
  kCgroupParent,
  kSupplementalGroup,
};

// What one hook owns: a field, and for a keyed field the key (an env name,
// a mount's container path, an annotation key; empty for a scalar).
struct FieldKey {
  Field field;
  std::string key;
  auto operator<=>(const FieldKey&) const = default;
  bool operator==(const FieldKey&) const = default;

  // As the state files (StageDecision.owners) and `crihookctl explain` spell
  // it: "env:NAME", "mount:/path", "cpuset_cpus".
  std::string str() const;
  // That spelling back; nullopt for a name no field has (a newer crihookd's).
  static std::optional<FieldKey> parse(std::string_view text);
};

// Only the resource fields (cpuset, CPU, memory and swap, OOM score, hugepages,
// unified): what UpdateContainerResources carries and what must survive
// kubelet's updates.
Adjustment resourcesOnly(const Adjustment& a);

// The resource fields of `later` over those of `earlier`, field by field
// (key by key in maps); the rest of `earlier` as it is.
Adjustment overlayResources(Adjustment earlier, const Adjustment& later);

// Adjustments of several hooks merged in chain order, each field remembering
// the hook that set it, so conflicts name both hooks and `crihookctl explain`
// can say who changed what.
class MergedAdjustment {
 public:
  // How a claim on a key that another hook holds with a different value ends.
  struct Resolution {
    enum class How {
      kConflict,       // refused, naming both hooks
      kSame,           // one decision spelt two ways: the held value stays
      kHolderKeeps,    // the holder decides; the claimant's value is dropped
      kClaimantTakes,  // the claimant decides; the held value is replaced
    };
    How how = How::kConflict;
    // Why one hook decided, for the override's log line; empty: nothing
    // to tell (an explicit wins_over), no override is listed.
    std::string why;
  };
  // Decides such a claim. Called on the merging thread; must not outlive
  // what it refers to (the chain passes one per run). Without one,
  // differing values are a conflict.
  using Resolver = std::function<Resolution(const FieldKey& key, const std::string& holder,
                                            std::string_view held, const std::string& claimant,
                                            std::string_view claimed)>;

  // A value that lost to another hook's by a rule worth telling.
  struct Override {
    FieldKey key;
    std::string winner, loser;
    std::string lost_value;  // the loser's value ("<removed>" for a removal)
    std::string why;
  };

  MergedAdjustment() = default;
  explicit MergedAdjustment(Resolver resolver) : resolver_(std::move(resolver)) {}

  // Adds `hook`'s adjustment after those added before. Setting a field or key
  // another hook already set to a different value is FAILED_PRECONDITION,
  // naming both hooks and the field ("hook gpu and hook rdma both set env
  // NVIDIA_VISIBLE_DEVICES: \"0\" vs \"1\""), unless the resolver decides it;
  // the same value from two hooks is no conflict. On error nothing of
  // `adjustment` is kept.
  absl::Status add(const std::string& hook, const Adjustment& adjustment);

  // The merged decision, with no owners.
  const Adjustment& result() const { return merged_; }

  // Who set `key`; empty when nobody did.
  std::string ownerOf(const FieldKey& key) const;
  // The same by the state files' spelling ("env:NAME", "cpuset_cpus").
  std::string ownerOf(std::string_view key) const;
  const std::map<FieldKey, std::string>& owners() const { return owners_; }
  // The values that lost, in the order they lost.
  const std::vector<Override>& overrides() const { return overrides_; }

 private:
  Resolver resolver_;
  Adjustment merged_;
  std::map<FieldKey, std::string> owners_;  // field -> hook
  std::vector<Override> overrides_;
};

}  // namespace crihook
