#include "hooks/apply.h"

#include "hooks/adjustment_schema.h"

namespace crihook {

namespace v1 = ::runtime::v1;

void applyToResources(const Adjustment& a, v1::LinuxContainerResources& r) {
  for (const FieldSpec* f : adjustmentSchema()) {
    if (f->resource()) f->applyToResources(a, r);
  }
}

void applyToContainer(const Adjustment& a, v1::ContainerConfig& c, v1::PodSandboxConfig* sandbox) {
  v1::LinuxContainerResources& r = *c.mutable_linux()->mutable_resources();
  for (const FieldSpec* f : adjustmentSchema()) {
    f->applyToContainer(a, c, sandbox);
    if (f->resource()) f->applyToResources(a, r);
  }
}

void applyToSandbox(const Adjustment& a, v1::PodSandboxConfig& c) {
  for (const FieldSpec* f : adjustmentSchema()) {
    f->applyToSandbox(a, c);
    if (f->resource() && f->present(a))
      f->applyToResources(a, *c.mutable_linux()->mutable_resources());
  }
}

}  // namespace crihook
