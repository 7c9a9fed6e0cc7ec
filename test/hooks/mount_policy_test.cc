// The mount policy: what hooks may mount from the host, and the chain
// refusing a call whose hook adds a denied mount, naming the hook.

#include "hooks/mount_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/logging.h"
#include "cri-api/runtime_v1.pb.h"
#include "hooks/chain.h"
#include "test/support/fake_cri_server.h"

namespace crihook {
namespace {

using ::testing::HasSubstr;

MountSpec rw(const std::string& host, const std::string& at = "/mnt") {
  return {at, host, /*readonly=*/false, 0};
}
MountSpec ro(const std::string& host, const std::string& at = "/mnt") {
  return {at, host, /*readonly=*/true, 0};
}

TEST(MountPolicy, PathsAreNormalisedLexically) {
  EXPECT_EQ(normaliseMountPath("/etc"), "/etc");
  EXPECT_EQ(normaliseMountPath("//etc"), "/etc");
  EXPECT_EQ(normaliseMountPath("/etc/"), "/etc");
  EXPECT_EQ(normaliseMountPath("/etc/../etc"), "/etc");
  EXPECT_EQ(normaliseMountPath("/./var//lib/./kubelet/"), "/var/lib/kubelet");
  EXPECT_EQ(normaliseMountPath("/tmp/../../etc"), "/etc");
  EXPECT_EQ(normaliseMountPath("/.."), "/");
  EXPECT_EQ(normaliseMountPath("/"), "/");
  EXPECT_EQ(normaliseMountPath("//"), "/");
  EXPECT_EQ(normaliseMountPath("etc"), "");
  EXPECT_EQ(normaliseMountPath(""), "");
}

TEST(MountPolicy, EachDefaultReadWriteRuleRefusesItsPathBelowAndAbove) {
  MountPolicy p;
  for (const char* path : {"/etc", "/proc", "/sys", "/var/lib/kubelet", "/var/lib/containerd",
                           "/var/lib/docker", "/var/lib/crihook"}) {
    SCOPED_TRACE(path);
    EXPECT_EQ(p.check("h", rw(path)).code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(p.check("h", rw(std::string(path) + "/x/y")).code(),
              absl::StatusCode::kPermissionDenied);  // below
    // Read-only is allowed (but of /proc itself, which holds the processes'
    // folders: AProcesssFolderUnderProcIsRefusedInAnyMode).
    if (std::string_view(path) != "/proc") {
      EXPECT_TRUE(p.check("h", ro(path)).ok());
    }
  }
  // Above: a rw mount of the parent holds the denied path.
  EXPECT_EQ(p.check("h", rw("/var/lib")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p.check("h", rw("/var")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p.check("h", rw("/")).code(), absl::StatusCode::kPermissionDenied);
  // Component match, not a prefix of the text.
  EXPECT_TRUE(p.check("h", rw("/etcd")).ok());
  EXPECT_TRUE(p.check("h", rw("/system")).ok());
  EXPECT_TRUE(p.check("h", rw("/var/lib/kubelet-plugins")).ok());
  EXPECT_TRUE(p.check("h", rw("/var/log")).ok());
  EXPECT_TRUE(p.check("h", rw("/opt/nvidia")).ok());
}

TEST(MountPolicy, EachDefaultDenyRuleRefusesEvenReadOnly) {
  MountPolicy p;
  for (const char* path : {"/run/containerd", "/var/run/containerd", "/run/crihook",
                           "/var/run/crihook", "/run/docker.sock", "/var/run/docker.sock"}) {
    SCOPED_TRACE(path);
    EXPECT_EQ(p.check("h", ro(path)).code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(p.check("h", rw(path)).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(p.check("h", ro("/run/containerd/containerd.sock")).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p.check("h", ro("/run")).code(), absl::StatusCode::kPermissionDenied);  // holds them
  EXPECT_EQ(p.check("h", ro("/")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(p.check("h", ro("/run/nvidia-persistenced/socket")).ok());
  EXPECT_TRUE(p.check("h", ro("/run/containerd-other")).ok());
}

TEST(MountPolicy, NothingMayCoverTheContainersRoot) {
  MountPolicy p({}, {});  // even with no host rule at all
  for (const char* at : {"/", "//", "/.", "/tmp/..", "/../.."}) {
    SCOPED_TRACE(at);
    absl::Status s = p.check("h", ro("/opt/image", at));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(s.message(), HasSubstr("the container's root"));
  }
  EXPECT_TRUE(p.check("h", ro("/opt/image", "/rootfs")).ok());
}

TEST(MountPolicy, NormalisedSpellingsOfADeniedPathAreRefused) {
  MountPolicy p;
  for (const char* path : {"//etc", "/etc/", "/etc/../etc", "/tmp/../etc/ssh", "/./etc",
                           "/var/lib/../lib/kubelet/pods", "/run/./containerd/"}) {
    SCOPED_TRACE(path);
    EXPECT_EQ(p.check("h", rw(path)).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(p.check("h", rw("etc")).code(), absl::StatusCode::kPermissionDenied);  // relative
  EXPECT_EQ(p.check("h", rw("/opt", "mnt")).code(), absl::StatusCode::kPermissionDenied);
}

// A process's folder under /proc reaches any path: /proc/1/root/<the
// runtime's socket> is the socket. Refused in any mode, whatever follows;
// /proc's own files that are no process's (the driver's) are not.
TEST(MountPolicy, AProcesssFolderUnderProcIsRefusedInAnyMode) {
  MountPolicy p;
  for (const char* path :
       {"/proc/1/root/run/containerd/containerd.sock", "/proc/self/root/run/crihook",
        "/proc/thread-self/root", "/proc/4242/root", "/proc/4242/cwd", "/proc/4242/fd/3",
        "/proc/1/task/1/root/etc", "/proc/self/../self/root", "/proc"}) {
    SCOPED_TRACE(path);
    const absl::Status s = p.check("h", ro(path));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(s.message()), HasSubstr("a process's folder under /proc"));
  }
  EXPECT_TRUE(p.check("h", ro("/proc/driver/nvidia/gpus")).ok()) << "the NVIDIA toolkit's";
  EXPECT_TRUE(p.check("h", ro("/proc/12ab")).ok()) << "no process's name";
}

// Another name for a denied path through a symbolic link is that path:
// a link to the socket, to its folder, to a folder above it, a chain of
// relative links; refused naming where it leads. A link elsewhere is fine.
TEST(MountPolicy, ALinkToADeniedPathIsThatPath) {
  testing::TempDir dir;
  namespace fs = std::filesystem;
  fs::create_directories(dir.file("run/containerd"));
  std::ofstream(dir.file("run/containerd/containerd.sock")) << "";
  fs::create_directories(dir.file("data"));
  MountPolicy p({dir.file("run/containerd")}, {});
  fs::create_symlink(dir.file("run/containerd/containerd.sock"), dir.file("sock"));
  fs::create_symlink(dir.file("run/containerd"), dir.file("folder"));
  fs::create_symlink(dir.file("run"), dir.file("above"));
  fs::create_symlink("folder", dir.file("relative"));      // -> folder -> run/containerd
  fs::create_symlink("../relative", dir.file("data/up"));  // data/up -> relative
  for (const std::string& via :
       {dir.file("sock"), dir.file("folder"), dir.file("folder/x.sock"), dir.file("above"),
        dir.file("relative/containerd.sock"), dir.file("data/up/containerd.sock")}) {
    SCOPED_TRACE(via);
    const absl::Status s = p.check("h", ro(via));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("[security.mounts] deny " + dir.file("run/containerd") +
                          " (the host path leads to \""));
  }
  fs::create_symlink(dir.file("data"), dir.file("elsewhere"));
  EXPECT_TRUE(p.check("h", ro(dir.file("elsewhere"))).ok());
  EXPECT_TRUE(p.check("h", ro(dir.file("data/missing/below"))).ok());

  // A loop is refused, not followed for ever.
  fs::create_symlink("loop-b", dir.file("loop-a"));
  fs::create_symlink("loop-a", dir.file("loop-b"));
  EXPECT_THAT(std::string(p.check("h", ro(dir.file("loop-a"))).message()),
              HasSubstr("more than 40 symbolic links"));
  EXPECT_EQ(resolveHostPath(dir.file("above/containerd")), dir.file("run/containerd"));
}

// A rule written through a link (/var/run on hosts where it is /run) also
// holds for the place it leads to.
TEST(MountPolicy, ARuleWrittenThroughALinkHoldsWhereItLeads) {
  testing::TempDir dir;
  namespace fs = std::filesystem;
  fs::create_directories(dir.file("run/crihook"));
  fs::create_symlink(dir.file("run"), dir.file("var-run"));
  MountPolicy p({dir.file("var-run/crihook")}, {});
  EXPECT_EQ(p.check("h", ro(dir.file("run/crihook/crihook.sock"))).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(MountPolicy, TheMessageNamesHookPathModeAndRule) {
  MountPolicy p;
  absl::Status s = p.check("gpu", rw("/etc/../etc/", "/host-etc"));
  EXPECT_EQ(s.message(),
            "hook gpu: mount of host \"/etc/../etc/\" at \"/host-etc\" (rw) is refused by the "
            "mount policy: [security.mounts] deny_rw /etc");
  // A hook's text is quoted and cut short.
  s = p.check("gpu", rw("/etc/" + std::string(500, 'x') + "\n"));
  EXPECT_LT(s.message().size(), 400u);
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

TEST(MountPolicy, ConfiguredListsReplaceTheDefaultsAndCrihooksOwnPathsStay) {
  auto c = parseConfig(R"(
[server]
listen = "/srv/cri/crihook.sock"
[backend]
endpoint = "unix:///srv/cri/containerd.sock"
[hooks]
state_dir = "/srv/crihook-state"
[security.mounts]
deny = ["/srv/secrets"]
deny_rw = ["/data/readonly/"]
)",
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  auto p = MountPolicy::fromConfig(*c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->check("h", rw("/etc")).ok());  // no longer a default rule
  EXPECT_EQ(p->check("h", ro("/srv/secrets/key")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p->check("h", rw("/data/readonly")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(p->check("h", ro("/data/readonly")).ok());
  // crihook's socket, the runtime's, and the state directory whatever the lists say.
  EXPECT_EQ(p->check("h", ro("/srv/cri/crihook.sock")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p->check("h", ro("/srv/cri")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p->check("h", ro("/srv/cri/containerd.sock")).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p->check("h", rw("/srv/crihook-state/pods")).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(p->check("h", ro("/srv/crihook-state/pods")).ok());

  // Empty lists: nothing but crihook's own and the container's root.
  c = parseConfig("[security.mounts]\ndeny = []\ndeny_rw = []\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  p = MountPolicy::fromConfig(*c);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->check("h", rw("/etc")).ok());
  EXPECT_TRUE(p->check("h", ro("/run/containerd/io.containerd.runtime.v2.task")).ok());
  EXPECT_EQ(p->check("h", ro("/run/containerd/containerd.sock")).code(),
            absl::StatusCode::kPermissionDenied);  // the configured backend
  EXPECT_EQ(p->check("h", ro("/run/containerd")).code(),
            absl::StatusCode::kPermissionDenied);  // holds it
  // Unset: the defaults.
  c = parseConfig("", "t.toml");
  p = MountPolicy::fromConfig(*c);
  EXPECT_EQ(p->check("h", rw("/etc")).code(), absl::StatusCode::kPermissionDenied);
}

TEST(MountPolicy, BadConfigNamesFileAndKey) {
  auto c = parseConfig("[security.mounts]\ndeny_rw = [\"/etc\", \"var/lib\"]\n", "t.toml");
  EXPECT_EQ(
      c.status().message(),
      "config t.toml: security.mounts.deny_rw[1]: expected an absolute path, got \"var/lib\"");
  c = parseConfig("[security.mounts]\ndenny = []\n", "t.toml");
  EXPECT_THAT(c.status().message(), HasSubstr("security.mounts.denny: unknown key"));
  c = parseConfig("[security.mounts]\ndeny = \"/etc\"\n", "t.toml");
  EXPECT_THAT(c.status().message(), HasSubstr("security.mounts.deny: expected an array"));
  c = parseConfig("[security]\nmount = {}\n", "t.toml");
  EXPECT_THAT(c.status().message(), HasSubstr("security.mount: unknown key"));
}

// A hook adding mounts, in a chain.
class MountingHook : public Hook {
 public:
  MountingHook(std::string name, std::vector<MountSpec> mounts)
      : name_(std::move(name)), mounts_(std::move(mounts)) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase) const override {
    return m == LifecycleMethod::kCreateContainer;
  }
  HookDecision run(const HookInput&) override {
    Adjustment a;
    a.mounts = mounts_;
    return HookDecision::proceed(a);
  }
  bool runsInline() const override { return true; }

 private:
  std::string name_;
  std::vector<MountSpec> mounts_;
};

TEST(MountPolicy, TheChainRefusesTheCallNamingTheHookWhateverItsFailurePolicy) {
  runtime::v1::CreateContainerRequest request;
  CallIdentity identity;
  HookInput in;
  in.method = LifecycleMethod::kCreateContainer;
  in.phase = Phase::kPre;
  in.request = &request;
  in.identity = &identity;

  HookChain chain(logger("hook"));  // the default policy, unset
  HookSettings ignore;
  ignore.failure_policy = FailurePolicy::kIgnore;
  chain.add(std::make_shared<MountingHook>("nvidia", std::vector{ro("/opt/nvidia", "/usr/nv")}),
            {});
  chain.add(std::make_shared<MountingHook>(
                "vendor-agent", std::vector{ro("/opt/x", "/x"), rw("/etc//", "/host/etc")}),
            ignore);
  ChainOutcome out = chain.run(in, std::chrono::steady_clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(out.status.message(),
            "PreCreateContainer: hook vendor-agent: mount of host \"/etc//\" at \"/host/etc\" (rw) "
            "is refused by the mount policy: [security.mounts] deny_rw /etc");
  EXPECT_EQ(chain.counters("vendor-agent").failures.load(), 1u);

  // Configured to allow it: the same chain passes both mounts through.
  HookChain allowed(logger("hook"));
  allowed.setMountPolicy(MountPolicy({}, {}));
  allowed.add(std::make_shared<MountingHook>("vendor-agent", std::vector{rw("/etc", "/host/etc")}),
              {});
  out = allowed.run(in, std::chrono::steady_clock::time_point::max());
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.merged.result().mounts.size(), 1u);
  EXPECT_EQ(out.merged.ownerOf("mount:/host/etc"), "vendor-agent");
}

}  // namespace
}  // namespace crihook
