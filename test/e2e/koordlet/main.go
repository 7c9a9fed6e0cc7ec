// koordlet is a Koordinator hook server for crihook's end-to-end tests,
// written from koordlet's own code (Koordinator a7a1b76, Apache-2.0; facts
// taken, no text copied) so that the test proves crihook against what
// koordlet answers, not against crihook's reading of it. It registers itself
// and answers runtime.v1alpha1.RuntimeHookService the way koordlet's proxy
// server does with the feature gates CPUSetAllocator, GroupIdentity,
// BatchResource (on by default) and GPUEnvInject, RDMADeviceInject (alpha,
// turned on as Koordinator's device-sharing guides do).
//
// Each part and the koordlet source it follows:
//
//   - flags, defaults, gates:   pkg/koordlet/runtimehooks/config.go
//     (NewDefaultConfig, InitFlags, defaultRuntimeHooksFG);
//     pkg/koordlet/util/system/config.go (NewDsModeConfig:
//     HAMICoreLibraryDirectoryPath /usr/local/vgpu/libvgpu.so)
//   - registration file:        proxyserver/server.go (server.Register: the
//     file <config path>/koordlet.json, json.MarshalIndent with a tab,
//     mode 0644, written after the server serves, runtimehooks.go Run);
//     pkg/runtimeproxy/config/config.go (RuntimeHookConfig's keys);
//     hooks/hooks.go (GetStages: the stages with a hook, in Go's map
//     order, which is random; Register: hooks sorted by name)
//   - calls and answers:        proxyserver/service.go (each *Hook: the
//     request echoed, RunHooks with the plugin failure policy, ProxyDone);
//     hooks/hooks.go (RunHooks: a failing hook is logged, the rest run
//     unless the policy is Fail)
//   - reading a request:        protocol/pod_context.go (PodRequest.FromProxy),
//     protocol/container_context.go (ContainerRequest.FromProxy,
//     getContainerID, ContainerMeta.FromProxy); koordlet/util/
//     cgroup_parent_utils.go (GetContainerCgroupParentDirByID,
//     GetKubeQoSByCgroupParent)
//   - filling an answer:        protocol/container_context.go
//     (ContainerResponse.ProxyDone: cpuset_cpus, cpu_quota, cpu_shares,
//     memory_limit_in_bytes, envs added; mounts and devices are not carried),
//     protocol/pod_context.go (PodResponse.ProxyDone: the same four
//     resources)
//   - gpu env inject:           hooks/gpu/gpu.go (InjectContainerGPUEnv)
//   - rdma device inject:       hooks/rdma/rdma.go (InjectDevice,
//     getUVerbsViaPciAdd): devices only, none of which the proxy carries
//   - CPUSetAllocator:          hooks/cpuset/cpuset.go (SetContainerCPUSet,
//     UnsetContainerCPUQuota, UnsetPodCPUQuota), hooks/cpuset/rule.go
//     (getContainerCPUSet, parseRule); pkg/util/pod.go (GetCPUSetFromPod),
//     pkg/util/pod_qos_utils.go (IsPodCfsQuotaNeedUnset)
//   - BatchResource:            hooks/batchresource/batch_resource.go
//     (SetPod*/SetContainer* CPUShares, CFSQuota, MemoryLimit), rule.go
//     (GetCFSQuotaScaleRatio: quota on, no scaling, without a NodeSLO);
//     koordlet/util/system/cgroup.go (MilliCPUToShares, MilliCPUToQuota),
//     cgroup_resource.go (their bounds); pkg/util/extended_resource.go
//   - GroupIdentity:            hooks/groupidentity/bvt.go (SetPodBvtValue:
//     a cgroup file only, from a NodeSLO rule; none here, so nothing)
//   - annotations and labels:   apis/extension (constants.go LabelPodQoS,
//     qos_utils.go GetQoSClassByAttrs, qos.go GetPodQoSClassByName,
//     numa_aware.go ResourceStatus, GetResourceStatus, GetNodeCPUSharePools,
//     GetNodeBECPUSharePools, GetKubeletCPUManagerPolicy, system_qos.go
//     GetSystemQOSResource, device_share.go GetDeviceAllocations,
//     resource.go GetExtendedResourceSpec)
//
// What koordlet reads from the API server is given on the command line: the
// NodeResourceTopology object's annotations (share pools, system QoS
// resource, kubelet CPU manager policy) as a JSON object in the file of
// -node-topology-annotations, parsed as koordlet's parseRule parses them.
// Without it the cpuset rule is nil, as in koordlet before its first
// NodeResourceTopology. koordlet's fixed host paths (/dev/infiniband,
// /sys/bus/pci/devices) are under -dev-root and -sys-root. Every call is
// logged to stderr as one JSON line ({"rpc":..., "pod":..., "response":...}).
//
//	koordlet -runtime-hooks-addr SOCK -runtime-hooks-host-endpoint SOCK
//	  -runtime-hooks-config-path DIR [-feature-gates GPUEnvInject=true,...]
//	  [-node-topology-annotations FILE] [-hami-core-library-directory-path P]
//	  [-dev-root DIR] [-sys-root DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"google.golang.org/grpc"

	koord "crihook/koord"
)

// ---- configuration (runtimehooks/config.go, util/system/config.go) ----

var (
	network        = flag.String("runtime-hooks-network", "unix", "rpc server network type for runtime hooks")
	addr           = flag.String("runtime-hooks-addr", "/host-var-run-koordlet/koordlet.sock", "rpc server address for runtime hooks")
	failurePolicy  = flag.String("runtime-hooks-failure-policy", "Ignore", "failure policy for runtime hooks")
	pluginPolicy   = flag.String("runtime-hooks-plugin-failure-policy", "Ignore", "stop running other hooks once someone failed")
	configPath     = flag.String("runtime-hooks-config-path", "/etc/runtime/hookserver.d", "config file path for runtime hooks")
	hostEndpoint   = flag.String("runtime-hooks-host-endpoint", "/var/run/koordlet/koordlet.sock", "host endpoint of runtime proxy")
	disableStages  = flag.String("runtime-hooks-disable-stages", "", "disable stages for runtime hooks (comma-separated)")
	featureGates   = flag.String("feature-gates", "", "A=true,B=false,...")
	hamiLibrary    = flag.String("hami-core-library-directory-path", "/usr/local/vgpu/libvgpu.so", "path of hami core library")
	nodeTopoFile   = flag.String("node-topology-annotations", "", "JSON object: the NodeResourceTopology's annotations (test input)")
	devRoot        = flag.String("dev-root", "/dev", "where koordlet's /dev is (test input)")
	sysRoot        = flag.String("sys-root", "/sys", "where koordlet's /sys is (test input)")
	disableUnsetCQ = flag.Bool("disable-unset-cpu-quota", false, "disable unset cpu quota for runtime hooks")
)

// The gates of runtimehooks/config.go defaultRuntimeHooksFG and the koordlet
// gates the hooks here read (pkg/features/koordlet_features.go), with their
// defaults. Only the first five have hooks here; enabling another is refused
// rather than silently not done.
var gates = map[string]bool{
	"GroupIdentity": true, "CPUSetAllocator": true, "GPUEnvInject": false,
	"RDMADeviceInject": false, "BatchResource": true, "CPUNormalization": false,
	"CoreSched": false, "TerwayQoS": false, "TCNetworkQoS": false, "Resctrl": false,
	"OOMScoreAdj": false, "BECPUManager": false, "HamiCoreVGPUMonitor": false,
}
var implemented = map[string]bool{"GroupIdentity": true, "CPUSetAllocator": true,
	"GPUEnvInject": true, "RDMADeviceInject": true, "BatchResource": true}

func parseGates(s string) error {
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		parts := strings.SplitN(kv, "=", 2)
		name := strings.TrimSpace(parts[0])
		if _, ok := gates[name]; !ok || len(parts) != 2 {
			return fmt.Errorf("-feature-gates: %q: unknown gate or no =true/false", kv)
		}
		on := strings.TrimSpace(parts[1]) == "true"
		if !on && strings.TrimSpace(parts[1]) != "false" {
			return fmt.Errorf("-feature-gates: %q: expected true or false", kv)
		}
		if on && !implemented[name] {
			return fmt.Errorf("-feature-gates: %s has no hook in this server", name)
		}
		gates[name] = on
	}
	return nil
}

// ---- Kubernetes quantities (k8s.io/apimachinery resource.Quantity) ----

// quantity is a resource.Quantity as JSON gives it: a string ("8Gi", "500m",
// "1e3") or a number (100).
type quantity struct{ v *big.Rat }

var suffixes = map[string]*big.Rat{
	"n": big.NewRat(1, 1000000000), "u": big.NewRat(1, 1000000), "m": big.NewRat(1, 1000),
	"": big.NewRat(1, 1), "k": big.NewRat(1000, 1), "M": big.NewRat(1000000, 1),
	"G": big.NewRat(1000000000, 1), "T": new(big.Rat).SetInt64(1000000000000),
	"P": new(big.Rat).SetInt64(1000000000000000), "E": new(big.Rat).SetInt64(1000000000000000000),
	"Ki": new(big.Rat).SetInt64(1 << 10), "Mi": new(big.Rat).SetInt64(1 << 20),
	"Gi": new(big.Rat).SetInt64(1 << 30), "Ti": new(big.Rat).SetInt64(1 << 40),
	"Pi": new(big.Rat).SetInt64(1 << 50), "Ei": new(big.Rat).SetInt64(1 << 60),
}

func parseQuantity(s string) (quantity, error) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, suffix := s[:i], s[i:]
	v, ok := new(big.Rat).SetString(num)
	if num == "" || !ok {
		return quantity{}, fmt.Errorf("quantity %q: not a number", s)
	}
	if mult, ok := suffixes[suffix]; ok {
		return quantity{v.Mul(v, mult)}, nil
	}
	if len(suffix) > 1 && (suffix[0] == 'e' || suffix[0] == 'E') {
		exp, ok := new(big.Int).SetString(suffix[1:], 10)
		if ok && exp.IsInt64() && exp.Int64() > -30 && exp.Int64() < 30 {
			p := new(big.Int).Exp(big.NewInt(10), big.NewInt(abs(exp.Int64())), nil)
			f := new(big.Rat).SetInt(p)
			if exp.Sign() < 0 {
				f.Inv(f)
			}
			return quantity{v.Mul(v, f)}, nil
		}
	}
	return quantity{}, fmt.Errorf("quantity %q: unknown suffix %q", s, suffix)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func (q *quantity) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("quantity %s: neither string nor number", b)
		}
		s = n.String()
	}
	p, err := parseQuantity(strings.TrimSpace(s))
	*q = p
	return err
}

// ceilScaled is the quantity times `scale`, rounded away from zero as
// Value() and MilliValue() round.
func (q quantity) ceilScaled(scale int64) int64 {
	if q.v == nil {
		return 0
	}
	x := new(big.Rat).Mul(q.v, big.NewRat(scale, 1))
	n, d := x.Num(), x.Denom()
	quo, rem := new(big.Int).QuoRem(n, d, new(big.Int)) // truncated toward zero
	if rem.Sign() != 0 {
		quo.Add(quo, big.NewInt(int64(rem.Sign())))
	}
	return quo.Int64()
}
func (q quantity) Value() int64   { return q.ceilScaled(1) }
func (q quantity) IsZero() bool   { return q.v == nil || q.v.Sign() == 0 }
func (q quantity) String() string { return q.v.RatString() }

type resourceList map[string]quantity

// ---- apis/extension ----

const (
	labelPodQoS                 = "koordinator.sh/qosClass"
	labelGPUIsolationProvider   = "koordinator.sh/gpu-isolation-provider"
	gpuIsolationProviderHAMI    = "HAMi-core"
	annotationResourceStatus    = "scheduling.koordinator.sh/resource-status"
	annotationDeviceAllocated   = "scheduling.koordinator.sh/device-allocated"
	annotationExtendedResource  = "node.koordinator.sh/extended-resource-spec"
	annotationCPUSharedPools    = "node.koordinator.sh/cpu-shared-pools"
	annotationBECPUSharedPools  = "node.koordinator.sh/be-cpu-shared-pools"
	annotationKubeletCPUManager = "kubelet.koordinator.sh/cpu-manager-policy"
	annotationSystemQOSResource = "node.koordinator.sh/system-qos-resource"
	resourceBatchCPU            = "kubernetes.io/batch-cpu"
	resourceBatchMemory         = "kubernetes.io/batch-memory"
	resourceGPUCore             = "koordinator.sh/gpu-core"
	resourceGPUMemory           = "koordinator.sh/gpu-memory"
	resourceGPUMemoryRatio      = "koordinator.sh/gpu-memory-ratio"
)

type qosClass string

const (
	qosLSE    qosClass = "LSE"
	qosLSR    qosClass = "LSR"
	qosLS     qosClass = "LS"
	qosBE     qosClass = "BE"
	qosSystem qosClass = "SYSTEM"
	qosNone   qosClass = ""
)

// qosClassByAttrs: the label only (the annotations are not read).
func qosClassByAttrs(labels map[string]string) qosClass {
	q, ok := labels[labelPodQoS]
	if !ok {
		return qosNone
	}
	switch c := qosClass(q); c {
	case qosLSE, qosLSR, qosLS, qosBE, qosSystem:
		return c
	}
	return qosNone
}

type numaNodeResource struct {
	Node      int32        `json:"node"`
	Resources resourceList `json:"resources,omitempty"`
}
type resourceStatus struct {
	CPUSet            string             `json:"cpuset,omitempty"`
	NUMANodeResources []numaNodeResource `json:"numaNodeResources,omitempty"`
}

// unmarshalAnnotation: a missing annotation is the zero value, a bad one an
// error, as each Get* of apis/extension.
func unmarshalAnnotation(annotations map[string]string, key string, out interface{}) error {
	data, ok := annotations[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal([]byte(data), out); err != nil {
		return fmt.Errorf("annotation %s: %v", key, err)
	}
	return nil
}

type cpuSharedPool struct {
	Socket int32  `json:"socket"`
	Node   int32  `json:"node"`
	CPUSet string `json:"cpuset,omitempty"`
}
type kubeletCPUManagerPolicy struct {
	Policy       string            `json:"policy,omitempty"`
	Options      map[string]string `json:"options,omitempty"`
	ReservedCPUs string            `json:"reservedCPUs,omitempty"`
}
type systemQOSResource struct {
	CPUSet          string `json:"cpuset,omitempty"`
	CPUSetExclusive *bool  `json:"cpusetExclusive,omitempty"`
}

type virtualFunction struct {
	Minor int    `json:"minor,omitempty"`
	BusID string `json:"busID,omitempty"`
}
type deviceAllocation struct {
	Minor     int32        `json:"minor"`
	Resources resourceList `json:"resources"`
	ID        string       `json:"id,omitempty"`
	Extension *struct {
		VirtualFunctions []virtualFunction `json:"vfs,omitempty"`
	} `json:"extension,omitempty"`
}

// deviceAllocations: nil without the annotation.
func deviceAllocations(annotations map[string]string) (map[string][]*deviceAllocation, error) {
	if _, ok := annotations[annotationDeviceAllocated]; !ok {
		return nil, nil
	}
	out := map[string][]*deviceAllocation{}
	return out, unmarshalAnnotation(annotations, annotationDeviceAllocated, &out)
}

type extendedResourceContainerSpec struct {
	Limits   resourceList `json:"limits,omitempty"`
	Requests resourceList `json:"requests,omitempty"`
}
type extendedResourceSpec struct {
	Containers map[string]extendedResourceContainerSpec `json:"containers,omitempty"`
}

// batch milli-CPU and memory of a resource list, -1 when absent
// (pkg/util/extended_resource.go: batch-cpu is counted in milli-cores).
func batchMilliCPU(r resourceList) int64 {
	if q, ok := r[resourceBatchCPU]; ok {
		return q.Value()
	}
	return -1
}
func batchMemory(r resourceList) int64 {
	if q, ok := r[resourceBatchMemory]; ok {
		return q.Value()
	}
	return -1
}

// ---- util/system/cgroup.go ----

const (
	cpuShareUnit  = 1024
	cpuSharesMin  = 2
	cpuSharesMax  = 262144
	cfsBasePeriod = 100000
	cfsQuotaMin   = 1000
)

func milliCPUToShares(m int64) int64 {
	if m <= 0 {
		return cpuSharesMin
	}
	s := m * cpuShareUnit / 1000
	if s < cpuSharesMin {
		s = cpuSharesMin
	}
	if s > cpuSharesMax {
		s = cpuSharesMax
	}
	return s
}

func milliCPUToQuota(m int64) int64 {
	q := m * cfsBasePeriod / 1000
	if q <= 0 {
		return -1
	} else if q < cfsQuotaMin {
		q = cfsQuotaMin
	}
	return q
}

// ---- protocol: the contexts hooks read and fill ----

type resources struct {
	CPUSet      *string `json:"cpuset,omitempty"`
	CFSQuota    *int64  `json:"cfsQuota,omitempty"`
	CPUShares   *int64  `json:"cpuShares,omitempty"`
	MemoryLimit *int64  `json:"memoryLimit,omitempty"`
}

func (r *resources) isSet() bool {
	return r.CPUSet != nil || r.CFSQuota != nil || r.CPUShares != nil || r.MemoryLimit != nil
}

func i64(v int64) *int64   { return &v }
func str(v string) *string { return &v }

type podRequest struct {
	namespace, name, uid string
	labels, annotations  map[string]string
	cgroupParent         string
	extended             *extendedResourceSpec // nil unless it names containers
}

type podContext struct {
	req  podRequest
	resp resources
}

type mount struct{ Destination, Type, Source string }
type device struct {
	Path         string
	Major, Minor int64
}

type containerRequest struct {
	podNamespace, podName, podUID string
	containerName, containerID    string
	podLabels, podAnnotations     map[string]string
	cgroupParent                  string
	envs                          map[string]string
	extended                      *extendedResourceContainerSpec
}

type containerContext struct {
	req     containerRequest
	resp    resources
	envs    map[string]string // AddContainerEnvs
	mounts  []mount           // AddContainerMounts: not carried by the proxy protocol
	devices []device          // AddContainerDevices: not carried either
}

func extendedSpec(annotations map[string]string) (*extendedResourceSpec, error) {
	spec := &extendedResourceSpec{}
	if err := unmarshalAnnotation(annotations, annotationExtendedResource, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

func podFromProxy(req *koord.PodSandboxHookRequest) *podContext {
	p := &podContext{req: podRequest{
		labels: req.GetLabels(), annotations: req.GetAnnotations(), cgroupParent: req.GetCgroupParent(),
	}}
	if m := req.GetPodMeta(); m != nil {
		p.req.namespace, p.req.name, p.req.uid = m.GetNamespace(), m.GetName(), m.GetUid()
	}
	if spec, err := extendedSpec(req.GetAnnotations()); err != nil {
		logf("pod %s/%s: %v", p.req.namespace, p.req.name, err)
	} else if spec != nil && spec.Containers != nil {
		p.req.extended = spec
	}
	return p
}

func containerFromProxy(req *koord.ContainerResourceHookRequest) *containerContext {
	c := &containerContext{req: containerRequest{
		podLabels: req.GetPodLabels(), podAnnotations: req.GetPodAnnotations(), envs: req.GetContainerEnvs(),
	}}
	if m := req.GetPodMeta(); m != nil {
		c.req.podNamespace, c.req.podName, c.req.podUID = m.GetNamespace(), m.GetName(), m.GetUid()
	}
	// getContainerID: the default runtime type (containerd) unless the pod is
	// docker's; the cgroupfs driver's container directory is the bare ID.
	runtime := "containerd"
	if _, ok := req.GetPodAnnotations()["io.kubernetes.docker.type"]; ok {
		runtime = "docker"
	}
	c.req.containerName = req.GetContainerMeta().GetName()
	c.req.containerID = runtime + "://" + req.GetContainerMeta().GetId()
	c.req.cgroupParent = filepath.Join(req.GetPodCgroupParent(), req.GetContainerMeta().GetId())
	if spec, err := extendedSpec(req.GetPodAnnotations()); err != nil {
		logf("container %s/%s/%s: %v", c.req.podNamespace, c.req.podName, c.req.containerName, err)
	} else if spec != nil && spec.Containers != nil {
		if cs, ok := spec.Containers[c.req.containerName]; ok {
			c.req.extended = &cs
		}
	}
	return c
}

// podProxyDone: PodResponse.ProxyDone.
func podProxyDone(p *podContext, resp *koord.PodSandboxHookResponse) {
	if p.resp.isSet() && resp.Resources == nil {
		resp.Resources = &koord.LinuxContainerResources{}
	}
	if p.resp.CPUSet != nil {
		resp.Resources.CpusetCpus = *p.resp.CPUSet
	}
	if p.resp.CPUShares != nil {
		resp.Resources.CpuShares = *p.resp.CPUShares
	}
	if p.resp.CFSQuota != nil {
		resp.Resources.CpuQuota = *p.resp.CFSQuota
	}
	if p.resp.MemoryLimit != nil {
		resp.Resources.MemoryLimitInBytes = *p.resp.MemoryLimit
	}
}

// containerProxyDone: ContainerResponse.ProxyDone. Mounts and devices have
// no field in the answer.
func containerProxyDone(c *containerContext, resp *koord.ContainerResourceHookResponse) {
	if c.resp.isSet() && resp.ContainerResources == nil {
		resp.ContainerResources = &koord.LinuxContainerResources{}
	}
	if c.resp.CPUSet != nil {
		resp.ContainerResources.CpusetCpus = *c.resp.CPUSet
	}
	if c.resp.CFSQuota != nil {
		resp.ContainerResources.CpuQuota = *c.resp.CFSQuota
	}
	if c.resp.CPUShares != nil {
		resp.ContainerResources.CpuShares = *c.resp.CPUShares
	}
	if c.resp.MemoryLimit != nil {
		resp.ContainerResources.MemoryLimitInBytes = *c.resp.MemoryLimit
	}
	if c.envs != nil {
		if resp.ContainerEnvs == nil {
			resp.ContainerEnvs = map[string]string{}
		}
		for k, v := range c.envs {
			resp.ContainerEnvs[k] = v
		}
	}
}

// ---- hooks (hooks/hooks.go) ----

const (
	stagePreRunPodSandbox            = "PreRunPodSandbox"
	stagePostStopPodSandbox          = "PostStopPodSandbox"
	stagePreCreateContainer          = "PreCreateContainer"
	stagePreStartContainer           = "PreStartContainer"
	stagePostStartContainer          = "PostStartContainer"
	stagePreUpdateContainerResources = "PreUpdateContainerResources"
	stagePostStopContainer           = "PostStopContainer"
	stagePreRemoveRunPodSandbox      = "PreRemoveRunPodSandbox"
)

type hook struct {
	name string
	fn   func(ctx interface{}) error
}

var stageHooks = map[string][]hook{
	stagePreRunPodSandbox: nil, stagePreCreateContainer: nil, stagePreStartContainer: nil,
	stagePostStartContainer: nil, stagePostStopContainer: nil, stagePostStopPodSandbox: nil,
	stagePreUpdateContainerResources: nil, stagePreRemoveRunPodSandbox: nil,
}

func register(stage, name string, fn func(ctx interface{}) error) {
	stageHooks[stage] = append(stageHooks[stage], hook{name, fn})
	sort.Slice(stageHooks[stage], func(i, j int) bool { return stageHooks[stage][i].name < stageHooks[stage][j].name })
}

// stages: the stages that have a hook and are not disabled, in Go's map
// order (random, as koordlet's).
func stages(disabled map[string]bool) []string {
	var out []string
	for stage, hooks := range stageHooks {
		if !disabled[stage] && len(hooks) > 0 {
			out = append(out, stage)
		}
	}
	return out
}

func runHooks(stage string, ctx interface{}) error {
	for _, h := range stageHooks[stage] {
		if err := h.fn(ctx); err != nil {
			logf("failed to run hook %s in stage %s, reason: %v", h.name, stage, err)
			if *pluginPolicy == "Fail" {
				return err
			}
		}
	}
	return nil
}

func registerHooks() {
	if gates["GroupIdentity"] {
		// SetPodBvtValue writes the pod cgroup's bvt from the NodeSLO rule,
		// which this server is never given: no rule, nothing done, and never
		// a field of the answer.
		register(stagePreRunPodSandbox, "GroupIdentity", func(interface{}) error { return nil })
	}
	if gates["CPUSetAllocator"] {
		register(stagePreCreateContainer, "CPUSetAllocator", setContainerCPUSetAndUnsetCFS)
		register(stagePreUpdateContainerResources, "CPUSetAllocator", setContainerCPUSetAndUnsetCFS)
		register(stagePreRunPodSandbox, "CPUSetAllocator", unsetPodCPUQuota)
	}
	if gates["GPUEnvInject"] {
		register(stagePreCreateContainer, "gpu env inject", injectContainerGPUEnv)
	}
	if gates["RDMADeviceInject"] {
		register(stagePreCreateContainer, "rdma device inject", injectRDMADevice)
	}
	if gates["BatchResource"] {
		register(stagePreRunPodSandbox, "BatchResource", setPodBatchResources)
		register(stagePreCreateContainer, "BatchResource", setContainerBatchResources)
		register(stagePreUpdateContainerResources, "BatchResource", setContainerBatchResources)
	}
}

// ---- gpu env inject (hooks/gpu/gpu.go) ----

func injectContainerGPUEnv(ctx interface{}) error {
	c := ctx.(*containerContext)
	alloc, err := deviceAllocations(c.req.podAnnotations)
	if err != nil {
		return err
	}
	devices := alloc["gpu"]
	if len(devices) == 0 {
		return nil
	}
	var ids []string
	for _, d := range devices {
		ids = append(ids, fmt.Sprintf("%d", d.Minor))
	}
	if c.envs == nil {
		c.envs = map[string]string{}
	}
	c.envs["NVIDIA_VISIBLE_DEVICES"] = strings.Join(ids, ",")
	if c.req.podLabels[labelGPUIsolationProvider] != gpuIsolationProviderHAMI {
		return nil
	}
	r := devices[0].Resources
	ratio, ok := r[resourceGPUMemoryRatio]
	if !ok {
		return fmt.Errorf("gpu memory ratio not found in gpu resource")
	}
	if ratio.Value() >= 100 {
		return nil
	}
	memory, ok := r[resourceGPUMemory]
	if !ok {
		return fmt.Errorf("gpu memory not found in gpu resource")
	}
	c.envs["CUDA_DEVICE_MEMORY_LIMIT"] = fmt.Sprintf("%d", memory.Value())
	if core, ok := r[resourceGPUCore]; ok {
		c.envs["CUDA_DEVICE_SM_LIMIT"] = fmt.Sprintf("%d", core.Value())
	}
	c.envs["LD_PRELOAD"] = *hamiLibrary
	c.mounts = append(c.mounts, mount{*hamiLibrary, "bind", *hamiLibrary},
		mount{"/tmp/vgpulock", "bind", "/tmp/vgpulock"})
	return nil
}

// ---- rdma device inject (hooks/rdma/rdma.go) ----

// deviceNumbers: system.GetDeviceNumbers, the major and minor of a device node.
func deviceNumbers(path string) (device, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(*devRoot, strings.TrimPrefix(path, "/dev/")), &st); err != nil {
		return device{}, fmt.Errorf("stat %s: %v", path, err)
	}
	dev := uint64(st.Rdev)
	major := (dev>>8)&0xfff | (dev>>32)&0xfffff000
	minor := dev&0xff | (dev>>12)&0xffffff00
	return device{Path: path, Major: int64(major), Minor: int64(minor)}, nil
}

func uverbsOf(pci string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(*sysRoot, "bus/pci/devices", pci, "infiniband_verbs"))
	if err != nil || len(entries) == 0 {
		return "", fmt.Errorf("failed to get uverbs of %s: %v", pci, err)
	}
	return "/dev/infiniband/" + entries[0].Name(), nil
}

func injectRDMADevice(ctx interface{}) error {
	c := ctx.(*containerContext)
	alloc, err := deviceAllocations(c.req.podAnnotations)
	if err != nil {
		return err
	}
	devices := alloc["rdma"]
	if len(devices) == 0 {
		return nil
	}
	cm, err := deviceNumbers("/dev/infiniband/rdma_cm")
	if err != nil {
		return err
	}
	c.devices = []device{cm}
	add := func(pci string) error {
		uverbs, err := uverbsOf(pci)
		if err != nil {
			return err
		}
		d, err := deviceNumbers(uverbs)
		if err != nil {
			return err
		}
		c.devices = append(c.devices, d)
		return nil
	}
	for _, d := range devices {
		if d.Extension != nil && len(d.Extension.VirtualFunctions) > 0 {
			for _, vf := range d.Extension.VirtualFunctions {
				if err := add(vf.BusID); err != nil {
					return err
				}
			}
			continue
		}
		if err := add(d.ID); err != nil {
			return err
		}
	}
	return nil
}

// ---- CPUSetAllocator (hooks/cpuset/cpuset.go, rule.go) ----

type cpusetRule struct {
	kubeletPolicy   kubeletCPUManagerPolicy
	sharePools      []cpuSharedPool
	beSharePools    []cpuSharedPool
	systemQOSCPUSet string
}

var rule *cpusetRule // nil until a NodeResourceTopology is given

// parseRule: the rule from the NodeResourceTopology's annotations.
func parseRule(annotations map[string]string) (*cpusetRule, error) {
	r := &cpusetRule{}
	if err := unmarshalAnnotation(annotations, annotationCPUSharedPools, &r.sharePools); err != nil {
		return nil, err
	}
	if err := unmarshalAnnotation(annotations, annotationBECPUSharedPools, &r.beSharePools); err != nil {
		return nil, err
	}
	if err := unmarshalAnnotation(annotations, annotationKubeletCPUManager, &r.kubeletPolicy); err != nil {
		return nil, err
	}
	var sys systemQOSResource
	if err := unmarshalAnnotation(annotations, annotationSystemQOSResource, &sys); err != nil {
		return nil, err
	}
	if sys.CPUSet != "" && !isCPUList(sys.CPUSet) {
		return nil, fmt.Errorf("annotation %s: cpuset %q is not a CPU list", annotationSystemQOSResource, sys.CPUSet)
	}
	r.systemQOSCPUSet = sys.CPUSet
	return r, nil
}

// isCPUList: a Linux CPU list ("0-3,8"), as pkg/util/cpuset.Parse accepts.
func isCPUList(s string) bool {
	for _, part := range strings.Split(s, ",") {
		bounds := strings.SplitN(part, "-", 2)
		for _, b := range bounds {
			if b == "" || strings.Trim(b, "0123456789") != "" {
				return false
			}
		}
	}
	return true
}

func cpusetFromPod(annotations map[string]string) (string, error) {
	var st resourceStatus
	if err := unmarshalAnnotation(annotations, annotationResourceStatus, &st); err != nil {
		return "", err
	}
	return st.CPUSet, nil
}

func (r *cpusetRule) containerCPUSet(c *containerRequest) (*string, error) {
	var alloc resourceStatus
	if err := unmarshalAnnotation(c.podAnnotations, annotationResourceStatus, &alloc); err != nil {
		return nil, err
	}
	qos := qosClassByAttrs(c.podLabels)
	numaAware := false
	for _, n := range alloc.NUMANodeResources {
		if n.Resources == nil {
			continue
		}
		if cpu := n.Resources["cpu"]; !cpu.IsZero() || batchMilliCPU(n.Resources) > 0 {
			numaAware = true
			break
		}
	}
	if numaAware {
		fromPools := func(pools []cpuSharedPool) string {
			var list []string
			for _, n := range alloc.NUMANodeResources {
				for _, p := range pools {
					if n.Node == p.Node {
						list = append(list, p.CPUSet)
					}
				}
			}
			return strings.Join(list, ",")
		}
		if qos == qosBE && gates["BECPUManager"] {
			return str(fromPools(r.beSharePools)), nil
		} else if qos != qosBE {
			return str(fromPools(r.sharePools)), nil
		}
	}
	if qos == qosSystem && r.systemQOSCPUSet != "" {
		return str(r.systemQOSCPUSet), nil
	}
	var all []string
	for _, p := range r.sharePools {
		all = append(all, p.CPUSet)
	}
	if qos == qosLS {
		return str(strings.Join(all, ",")), nil
	}
	if strings.Contains(c.cgroupParent, "besteffort") {
		// kube BestEffort (QoS BE included): an empty cpuset.
		return str(""), nil
	}
	if r.kubeletPolicy.Policy == "static" {
		return nil, nil
	}
	return str(strings.Join(all, ",")), nil
}

func setContainerCPUSetAndUnsetCFS(ctx interface{}) error {
	c := ctx.(*containerContext)
	if cpuset, err := cpusetFromPod(c.req.podAnnotations); err != nil {
		return err
	} else if cpuset != "" {
		c.resp.CPUSet = str(cpuset)
	} else if rule != nil {
		v, err := rule.containerCPUSet(&c.req)
		if err != nil {
			return err
		}
		c.resp.CPUSet = v
	}
	// UnsetContainerCPUQuota
	if *disableUnsetCQ {
		return nil
	}
	if cpuset, err := cpusetFromPod(c.req.podAnnotations); err != nil {
		return err
	} else if cpuset != "" {
		c.resp.CFSQuota = i64(-1)
	}
	return nil
}

func unsetPodCPUQuota(ctx interface{}) error {
	p := ctx.(*podContext)
	if *disableUnsetCQ {
		return nil
	}
	if cpuset, err := cpusetFromPod(p.req.annotations); err != nil {
		return err
	} else if cpuset != "" {
		p.resp.CFSQuota = i64(-1)
	}
	return nil
}

// ---- BatchResource (hooks/batchresource/batch_resource.go) ----

func setPodBatchResources(ctx interface{}) error {
	p := ctx.(*podContext)
	if qosClassByAttrs(p.req.labels) != qosBE || p.req.extended == nil {
		return nil
	}
	var request, limit, memory int64
	for _, c := range p.req.extended.Containers {
		if c.Requests == nil {
			continue
		}
		if r := batchMilliCPU(c.Requests); r > 0 {
			request += r
		}
	}
	p.resp.CPUShares = i64(milliCPUToShares(request))
	// CFS quota is on and unscaled without a NodeSLO (rule.go).
	for _, c := range p.req.extended.Containers {
		l := int64(-1)
		if c.Limits != nil {
			l = batchMilliCPU(c.Limits)
		}
		if l <= 0 {
			limit = -1
			break
		}
		limit += l
	}
	p.resp.CFSQuota = i64(milliCPUToQuota(limit))
	for _, c := range p.req.extended.Containers {
		l := int64(-1)
		if c.Limits != nil {
			l = batchMemory(c.Limits)
		}
		if l <= 0 {
			memory = -1
			break
		}
		memory += l
	}
	p.resp.MemoryLimit = i64(memory)
	return nil
}

func setContainerBatchResources(ctx interface{}) error {
	c := ctx.(*containerContext)
	if qosClassByAttrs(c.req.podLabels) != qosBE || c.req.extended == nil {
		return nil
	}
	spec := c.req.extended
	request := int64(0)
	if spec.Requests != nil {
		if r := batchMilliCPU(spec.Requests); r > 0 {
			request = r
		}
	}
	c.resp.CPUShares = i64(milliCPUToShares(request))
	limit, memory := int64(0), int64(0)
	if spec.Limits != nil {
		if l := batchMilliCPU(spec.Limits); l > 0 {
			limit = l
		}
		if m := batchMemory(spec.Limits); m > 0 {
			memory = m
		}
	}
	c.resp.CFSQuota = i64(milliCPUToQuota(limit))
	if memory <= 0 {
		memory = -1
	}
	c.resp.MemoryLimit = i64(memory)
	return nil
}

// ---- the server (proxyserver/server.go, service.go) ----

type server struct{}

func logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "koordlet: "+format+"\n", args...)
}

func logCall(rpc, pod, container string, resp interface{}, extra map[string]interface{}) {
	line := map[string]interface{}{"rpc": rpc, "pod": pod, "response": resp}
	if container != "" {
		line["container"] = container
	}
	for k, v := range extra {
		line[k] = v
	}
	b, _ := json.Marshal(line)
	fmt.Fprintln(os.Stderr, string(b))
}

func (server) podHook(stage string, req *koord.PodSandboxHookRequest) (*koord.PodSandboxHookResponse, error) {
	resp := &koord.PodSandboxHookResponse{
		Labels: req.GetLabels(), Annotations: req.GetAnnotations(),
		CgroupParent: req.GetCgroupParent(), Resources: req.GetResources(),
	}
	p := podFromProxy(req)
	err := runHooks(stage, p)
	podProxyDone(p, resp)
	logCall(stage, p.req.namespace+"/"+p.req.name, "", resp, nil)
	return resp, err
}

func (server) containerHook(stage string, req *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	resp := &koord.ContainerResourceHookResponse{
		ContainerAnnotations: req.GetContainerAnnotations(), ContainerResources: req.GetContainerResources(),
		PodCgroupParent: req.GetPodCgroupParent(), ContainerEnvs: req.GetContainerEnvs(),
	}
	c := containerFromProxy(req)
	err := runHooks(stage, c)
	containerProxyDone(c, resp)
	extra := map[string]interface{}{}
	if len(c.mounts) > 0 {
		extra["mounts_not_carried"] = c.mounts
	}
	if len(c.devices) > 0 {
		extra["devices_not_carried"] = c.devices
	}
	logCall(stage, c.req.podNamespace+"/"+c.req.podName, c.req.containerName, resp, extra)
	return resp, err
}

func (s server) PreRunPodSandboxHook(_ context.Context, r *koord.PodSandboxHookRequest) (*koord.PodSandboxHookResponse, error) {
	return s.podHook(stagePreRunPodSandbox, r)
}
func (s server) PostStopPodSandboxHook(_ context.Context, r *koord.PodSandboxHookRequest) (*koord.PodSandboxHookResponse, error) {
	return s.podHook(stagePostStopPodSandbox, r)
}
func (s server) PreCreateContainerHook(_ context.Context, r *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return s.containerHook(stagePreCreateContainer, r)
}
func (s server) PreStartContainerHook(_ context.Context, r *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return s.containerHook(stagePreStartContainer, r)
}
func (s server) PostStartContainerHook(_ context.Context, r *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return s.containerHook(stagePostStartContainer, r)
}
func (s server) PostStopContainerHook(_ context.Context, r *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return s.containerHook(stagePostStopContainer, r)
}
func (s server) PreUpdateContainerResourcesHook(_ context.Context, r *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return s.containerHook(stagePreUpdateContainerResources, r)
}

// runtimeHookConfig: pkg/runtimeproxy/config RuntimeHookConfig.
type runtimeHookConfig struct {
	RemoteEndpoint string   `json:"remote-endpoint,omitempty"`
	FailurePolicy  string   `json:"failure-policy,omitempty"`
	RuntimeHooks   []string `json:"runtime-hooks,omitempty"`
}

func writeRegistration() error {
	disabled := map[string]bool{}
	for _, s := range strings.Split(*disableStages, ",") {
		if s != "" {
			disabled[s] = true
		}
	}
	data, _ := json.MarshalIndent(runtimeHookConfig{*hostEndpoint, *failurePolicy, stages(disabled)}, "", "\t")
	return os.WriteFile(filepath.Join(*configPath, "koordlet.json"), data, 0644)
}

func run() error {
	flag.Parse()
	if err := parseGates(*featureGates); err != nil {
		return err
	}
	for _, p := range []*string{failurePolicy, pluginPolicy} {
		if *p != "Fail" && *p != "Ignore" {
			return fmt.Errorf("failure policy %q: failure policy type not supported", *p)
		}
	}
	if *nodeTopoFile != "" {
		data, err := os.ReadFile(*nodeTopoFile)
		if err != nil {
			return err
		}
		var annotations map[string]string
		if err := json.Unmarshal(data, &annotations); err != nil {
			return fmt.Errorf("%s: %v", *nodeTopoFile, err)
		}
		if rule, err = parseRule(annotations); err != nil {
			return fmt.Errorf("%s: %v", *nodeTopoFile, err)
		}
	}
	registerHooks()
	if *network == "unix" {
		_ = syscall.Unlink(*addr)
	}
	l, err := net.Listen(*network, *addr)
	if err != nil {
		return fmt.Errorf("failed to create runtime hook server, error: %v", err)
	}
	s := grpc.NewServer()
	koord.RegisterRuntimeHookServiceServer(s, server{})
	go func() { _ = s.Serve(l) }()
	if err := writeRegistration(); err != nil {
		return err
	}
	logf("serving on %s, registered in %s", *addr, filepath.Join(*configPath, "koordlet.json"))
	select {}
}

func main() {
	if err := run(); err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}
