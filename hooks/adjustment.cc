#include "hooks/adjustment.h"

#include "base/quote.h"
#include "base/text.h"
#include "hooks/adjustment_schema.h"

namespace crihook {
namespace {

// A value a hook set (it may come from a pod annotation), shown in a
// conflict message.
std::string quoted(std::string_view v) { return v == kRemoved ? std::string(v) : quote(v); }

// The owner bookkeeping of one MergedAdjustment::add, on copies so that a
// conflict leaves the merge as it was.
class OwnerClaims final : public Claims {
 public:
  OwnerClaims(const std::string& hook, std::map<FieldKey, std::string>& owners,
              std::vector<MergedAdjustment::Override>& overrides,
              const MergedAdjustment::Resolver& resolver)
      : hook_(hook), owners_(owners), overrides_(overrides), resolver_(resolver) {}

  absl::Status claim(Field field, std::string_view key, const std::string& old_value,
                     const std::string& value, bool& store) override {
    using How = MergedAdjustment::Resolution::How;
    store = false;
    FieldKey fk{field, std::string(key)};
    auto [it, added] = owners_.try_emplace(fk, hook_);
    if (added) {
      store = true;
      return absl::OkStatus();
    }
    if (old_value == value) return absl::OkStatus();  // the same decision twice
    MergedAdjustment::Resolution r;
    if (resolver_) r = resolver_(fk, it->second, old_value, hook_, value);
    switch (r.how) {
      case How::kSame:
        return absl::OkStatus();
      case How::kHolderKeeps:
        if (!r.why.empty())
          overrides_.push_back({std::move(fk), it->second, hook_, value, std::move(r.why)});
        return absl::OkStatus();
      case How::kClaimantTakes:
        if (!r.why.empty())
          overrides_.push_back({std::move(fk), hook_, it->second, old_value, std::move(r.why)});
        it->second = hook_;
        store = true;
        return absl::OkStatus();
      case How::kConflict:
        break;
    }
    const std::string_view name = fieldSpec(field).name;
    return absl::FailedPreconditionError(cat("hook ", it->second, " and hook ", hook_, " both set ",
                                             name, key.empty() ? "" : " ", key, ": ",
                                             quoted(old_value), " vs ", quoted(value)));
  }

 private:
  const std::string& hook_;
  std::map<FieldKey, std::string>& owners_;
  std::vector<MergedAdjustment::Override>& overrides_;
  const MergedAdjustment::Resolver& resolver_;
};

}  // namespace

std::string FieldKey::str() const {
  const std::string_view name = fieldSpec(field).name;
  return key.empty() && fieldSpec(field).kind == FieldKind::kScalar ? std::string(name)
                                                                    : cat(name, ":", key);
}

std::optional<FieldKey> FieldKey::parse(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  for (const FieldSpec* f : adjustmentSchema()) {
    if (f->name != name) continue;
    const bool scalar = f->kind == FieldKind::kScalar;
    if (scalar != (colon == std::string_view::npos)) return std::nullopt;
    return FieldKey{f->field, scalar ? std::string() : std::string(text.substr(colon + 1))};
  }
  return std::nullopt;
}

bool Adjustment::empty() const {
  for (const FieldSpec* f : adjustmentSchema()) {
    if (f->present(*this)) return false;
  }
  return true;
}

Adjustment resourcesOnly(const Adjustment& a) { return overlayResources(Adjustment{}, a); }

Adjustment overlayResources(Adjustment earlier, const Adjustment& later) {
  for (const FieldSpec* f : adjustmentSchema()) {
    if (f->resource()) f->overlay(later, earlier);
  }
  return earlier;
}

std::string MergedAdjustment::ownerOf(const FieldKey& key) const {
  auto it = owners_.find(key);
  return it == owners_.end() ? std::string() : it->second;
}

std::string MergedAdjustment::ownerOf(std::string_view key) const {
  auto parsed = FieldKey::parse(key);
  return parsed ? ownerOf(*parsed) : std::string();
}

absl::Status MergedAdjustment::add(const std::string& hook, const Adjustment& a) {
  // Work on copies so a conflict leaves the merge as it was.
  Adjustment m = merged_;
  std::map<FieldKey, std::string> owners = owners_;
  std::vector<Override> overrides = overrides_;
  OwnerClaims claims(hook, owners, overrides, resolver_);
  for (const FieldSpec* f : adjustmentSchema()) {
    if (!f->present(a)) continue;
    if (absl::Status s = f->merge(a, m, claims); !s.ok()) return s;
  }
  merged_ = std::move(m);
  owners_ = std::move(owners);
  overrides_ = std::move(overrides);
  return absl::OkStatus();
}

}  // namespace crihook
