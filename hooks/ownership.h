#pragma once

// Two hooks' values for one field that may be one decision in two spellings,
// and who decides when they are not: what lets crihook's device hooks run
// beside koordlet (docs/koordinator.md "Beside koordlet").
//
// koordlet names GPUs by minor ("2,3"), crihook's gpu hook by UUID; a
// cpuset may be written "0-3" or "2,3,0,1". Values that name the same
// thing are no conflict. Values that really differ between a crihook hook
// and a Koordinator hook server are decided by the class of the field
// ([hooks.owners], config/config.h's kOwnerClasses).

#include <string_view>

#include "config/config.h"
#include "hooks/adjustment.h"
#include "topology/topology.h"

namespace crihook {

// The class of fields `key` belongs to.
OwnerClass ownerClassOf(const FieldKey& key);

// Whether `a` and `b`, two values of `key`, are the same decision:
// - env NVIDIA_VISIBLE_DEVICES: the same set of the node's GPUs, each named
//   by its minor (what Koordinator's scheduler allocates and koordlet
//   writes), its UUID or its PCI address; a GPU the node lacks, "all",
//   "none" or a MIG name matches only its own spelling;
// - cpuset_cpus, cpuset_mems: the same CPUs (nodes), whatever the order and
//   ranges; an unparsable list matches only its own spelling;
// - anything else: the same bytes.
// `topology` may be null (then GPUs match only by the same spelling of each).
bool sameDecision(const FieldKey& key, std::string_view a, std::string_view b,
                  const topology::Snapshot* topology);

}  // namespace crihook
