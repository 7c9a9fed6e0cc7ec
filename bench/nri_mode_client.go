// nri_mode_client: the timed CRI client of bench/nri-mode.sh, on grpc-go
// (kubelet's client library), dialling a CRI socket as kubelet does. gocri
// (test/e2e/gocri) times only Version, and its lifecycle adds status calls
// and an exec and waits 2 s in StopContainer (its container, sleep as PID 1,
// ignores SIGTERM); this one times each lifecycle step on its own.
//
//	nri_mode_client -endpoint SOCK unary [-calls N] [-cpu NAME=PID,…]
//	nri_mode_client -endpoint SOCK lifecycle -image NAME -prefix NAME [-pods N] [-env-probe KEY]
//	    [-cpu NAME=PID,…]
//	nri_mode_client -endpoint SOCK createremove -image NAME -prefix NAME [-cycles N]
//	nri_mode_client -endpoint SOCK cleanup
//
// unary: ListPodSandbox (kubelet's PLEG calls it every second) N times on one
// connection after 50 warm-up calls; prints {"p50_us":…, "p99_us":…,
// "cpu_us": {NAME: µs}} (-cpu as lifecycle's, over the timed calls).
//
// lifecycle: one warm-up pod, untimed (with -env-probe, it also reads KEY in
// the running container with ExecSync: what the hooks set reached it), then
// N pods one after another, each RunPodSandbox, CreateContainer,
// StartContainer, StopContainer, RemoveContainer, StopPodSandbox,
// RemovePodSandbox timed one by one; prints {"env":…, "pods":[{step: µs,
// …, "total": µs}], "cpu_us": {NAME: µs}}: with -cpu, the CPU time each
// named process (all its threads, from /proc/PID/task/*/schedstat) spent
// while the timed pods ran. The container is a shell that exits on SIGTERM,
// so StopContainer measures the runtime, not a grace period.
//
// createremove: in one pod, CreateContainer and RemoveContainer of a
// container never started, N times after 5 untimed; no runc process runs
// in them, so they show a front's share with less of the runtime's noise
// (NRI: CreateContainer, PostCreateContainer and RemoveContainer events;
// proxy mode: two intercepted calls). Prints {"p50_us":…} of the pair and
// {"create_p50_us", "remove_p50_us"}.
//
// cleanup: stops and removes every pod the runtime has (what a run that
// failed half-way left).
//
// A failed call prints its step and gRPC status on stderr and exits 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	cri "crihook/cri"
)

var (
	endpoint = flag.String("endpoint", "", "CRI Unix socket path")
	timeout  = flag.Duration("timeout", 60*time.Second, "deadline of each call")
)

// The lifecycle's steps, in the order they run and are printed.
var steps = []string{"RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer",
	"RemoveContainer", "StopPodSandbox", "RemovePodSandbox"}

func check(step string, err error) {
	if err == nil {
		return
	}
	st := status.Convert(err)
	fmt.Fprintf(os.Stderr, "nri_mode_client: %s: %s: %s\n", step, st.Code(), st.Message())
	os.Exit(1)
}

func dial() *grpc.ClientConn {
	// As kubelet: the target is the socket path, the dialer ignores it.
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", *endpoint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, *endpoint, grpc.WithInsecure(),
		grpc.WithContextDialer(dialer), grpc.WithBlock())
	check("Dial", err)
	return conn
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func printJSON(v interface{}) {
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
}

func unary(rs cri.RuntimeServiceClient, args []string) {
	fs := flag.NewFlagSet("unary", flag.ExitOnError)
	calls := fs.Int("calls", 2000, "timed calls")
	cpuList := fs.String("cpu", "", "NAME=PID,…: processes whose CPU time the timed calls cost")
	fs.Parse(args)
	procs := parseCPU(*cpuList)
	if *calls < 1 {
		fmt.Fprintln(os.Stderr, "nri_mode_client unary: -calls must be at least 1")
		os.Exit(2)
	}
	one := func() {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		_, err := rs.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
		check("ListPodSandbox", err)
	}
	for i := 0; i < 50; i++ {
		one()
	}
	cpu := cpuBefore(procs)
	lat := make([]time.Duration, *calls)
	for i := range lat {
		t0 := time.Now()
		one()
		lat[i] = time.Since(t0)
	}
	cpuAfter(procs, cpu)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	at := func(p float64) float64 { return micros(lat[int(p*float64(len(lat)-1))]) }
	printJSON(map[string]interface{}{"calls": len(lat), "p50_us": at(0.5), "p99_us": at(0.99),
		"cpu_us": cpu})
}

// onePod runs one pod through its lifecycle and returns each step's time in
// µs; with probe set, the value of that environment variable in the running
// container ("" when unset), read between StartContainer and StopContainer
// and not counted.
func podConfig(name, logDir string) *cri.PodSandboxConfig {
	return &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		LogDirectory: logDir,
		// No CNI here: the pod uses the node's network.
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE},
		}},
	}
}

func containerConfig(image string) *cri.ContainerConfig {
	return &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: "box"},
		Image:    &cri.ImageSpec{Image: image},
		// PID 1 ignores a signal it has no handler for: the trap makes
		// SIGTERM end it at once.
		Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
		LogPath: "box.log",
	}
}

func onePod(rs cri.RuntimeServiceClient, image, name, logDir, probe string) (map[string]float64, string) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	took := map[string]float64{}
	timed := func(step string, f func() error) {
		t0 := time.Now()
		err := f()
		took[step] = micros(time.Since(t0))
		check(step+" "+name, err)
	}
	pc := podConfig(name, logDir)
	var podID, ctrID string
	timed("RunPodSandbox", func() error {
		r, err := rs.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: pc})
		podID = r.GetPodSandboxId()
		return err
	})
	timed("CreateContainer", func() error {
		r, err := rs.CreateContainer(ctx, &cri.CreateContainerRequest{
			PodSandboxId:  podID,
			Config:        containerConfig(image),
			SandboxConfig: pc,
		})
		ctrID = r.GetContainerId()
		return err
	})
	timed("StartContainer", func() error {
		_, err := rs.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctrID})
		return err
	})
	value := ""
	if probe != "" {
		// busybox has env, not printenv.
		r, err := rs.ExecSync(ctx, &cri.ExecSyncRequest{
			ContainerId: ctrID, Cmd: []string{"/bin/env"}, Timeout: 20,
		})
		check("ExecSync "+name, err)
		for _, line := range strings.Split(string(r.GetStdout()), "\n") {
			if strings.HasPrefix(line, probe+"=") {
				value = strings.TrimPrefix(line, probe+"=")
			}
		}
	}
	timed("StopContainer", func() error {
		_, err := rs.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: ctrID, Timeout: 10})
		return err
	})
	timed("RemoveContainer", func() error {
		_, err := rs.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: ctrID})
		return err
	})
	timed("StopPodSandbox", func() error {
		_, err := rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: podID})
		return err
	})
	timed("RemovePodSandbox", func() error {
		_, err := rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: podID})
		return err
	})
	total := 0.0
	for _, s := range steps {
		total += took[s]
	}
	took["total"] = total
	return took, value
}

// cpuTime is the CPU time, in µs, the process `pid`'s threads have run
// (the first field of each /proc/PID/task/TID/schedstat, in ns); -1 when it
// cannot be read.
func cpuTime(pid int) float64 {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		return -1
	}
	ns := 0.0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err == nil {
			ns += v
		}
	}
	return ns / 1000
}

// parseCPU reads -cpu's NAME=PID,… list.
func parseCPU(list string) map[string]int {
	out := map[string]int{}
	if list == "" {
		return out
	}
	for _, item := range strings.Split(list, ",") {
		name, pid, ok := strings.Cut(item, "=")
		n, err := strconv.Atoi(pid)
		if !ok || name == "" || err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "nri_mode_client lifecycle: -cpu: expected NAME=PID, got %q\n", item)
			os.Exit(2)
		}
		out[name] = n
	}
	return out
}

// cpuBefore reads each process's CPU time; cpuAfter turns the readings into
// what was spent since (exiting if a process can no longer be read).
func cpuBefore(procs map[string]int) map[string]float64 {
	cpu := map[string]float64{}
	for name, pid := range procs {
		cpu[name] = cpuTime(pid)
	}
	return cpu
}

func cpuAfter(procs map[string]int, cpu map[string]float64) {
	for name, pid := range procs {
		after := cpuTime(pid)
		if after < 0 || cpu[name] < 0 {
			fmt.Fprintf(os.Stderr, "nri_mode_client: -cpu: cannot read /proc/%d/task\n", pid)
			os.Exit(1)
		}
		cpu[name] = after - cpu[name]
	}
}

func lifecycle(rs cri.RuntimeServiceClient, args []string) {
	fs := flag.NewFlagSet("lifecycle", flag.ExitOnError)
	image := fs.String("image", "", "the container's image (present on the node)")
	prefix := fs.String("prefix", "", "pod names: PREFIX-warm, PREFIX-0, PREFIX-1, …")
	pods := fs.Int("pods", 3, "timed pods")
	logDir := fs.String("log-dir", os.TempDir(), "the pods' log directory")
	probe := fs.String("env-probe", "", "environment variable to read in the warm-up pod's container")
	cpuList := fs.String("cpu", "", "NAME=PID,…: processes whose CPU time the timed pods cost")
	fs.Parse(args)
	procs := parseCPU(*cpuList)
	if *image == "" || *prefix == "" || *pods < 1 {
		fmt.Fprintln(os.Stderr, "nri_mode_client lifecycle: needs -image, -prefix and -pods >= 1")
		os.Exit(2)
	}
	_, env := onePod(rs, *image, *prefix+"-warm", *logDir, *probe)
	cpu := cpuBefore(procs)
	out := []map[string]float64{}
	for i := 0; i < *pods; i++ {
		took, _ := onePod(rs, *image, fmt.Sprintf("%s-%d", *prefix, i), *logDir, "")
		out = append(out, took)
	}
	cpuAfter(procs, cpu)
	printJSON(map[string]interface{}{"env": env, "pods": out, "cpu_us": cpu})
}

func createRemove(rs cri.RuntimeServiceClient, args []string) {
	fs := flag.NewFlagSet("createremove", flag.ExitOnError)
	image := fs.String("image", "", "the container's image (present on the node)")
	prefix := fs.String("prefix", "", "the pod's name")
	cycles := fs.Int("cycles", 30, "timed create-remove pairs")
	logDir := fs.String("log-dir", os.TempDir(), "the pod's log directory")
	fs.Parse(args)
	if *image == "" || *prefix == "" || *cycles < 1 {
		fmt.Fprintln(os.Stderr, "nri_mode_client createremove: needs -image, -prefix and -cycles >= 1")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	pc := podConfig(*prefix, *logDir)
	run, err := rs.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: pc})
	check("RunPodSandbox "+*prefix, err)
	podID := run.GetPodSandboxId()
	var create, remove, pair []time.Duration
	for i := 0; i < 5+*cycles; i++ {
		t0 := time.Now()
		c, err := rs.CreateContainer(ctx, &cri.CreateContainerRequest{
			PodSandboxId: podID, Config: containerConfig(*image), SandboxConfig: pc,
		})
		check("CreateContainer "+*prefix, err)
		t1 := time.Now()
		_, err = rs.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: c.GetContainerId()})
		check("RemoveContainer "+*prefix, err)
		t2 := time.Now()
		if i >= 5 {
			create = append(create, t1.Sub(t0))
			remove = append(remove, t2.Sub(t1))
			pair = append(pair, t2.Sub(t0))
		}
	}
	_, err = rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: podID})
	check("StopPodSandbox "+*prefix, err)
	_, err = rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: podID})
	check("RemovePodSandbox "+*prefix, err)
	p50 := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return micros(d[(len(d)-1)/2])
	}
	printJSON(map[string]interface{}{
		"cycles": len(pair), "p50_us": p50(pair), "create_p50_us": p50(create),
		"remove_p50_us": p50(remove),
	})
}

func cleanup(rs cri.RuntimeServiceClient) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	list, err := rs.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	check("ListPodSandbox", err)
	for _, p := range list.GetItems() {
		_, err := rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: p.GetId()})
		check("StopPodSandbox "+p.GetMetadata().GetName(), err)
		_, err = rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: p.GetId()})
		check("RemovePodSandbox "+p.GetMetadata().GetName(), err)
	}
}

func main() {
	flag.Parse()
	if *endpoint == "" || flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: nri_mode_client -endpoint SOCK unary|lifecycle|createremove|cleanup ...")
		os.Exit(2)
	}
	conn := dial()
	defer conn.Close()
	rs := cri.NewRuntimeServiceClient(conn)
	switch flag.Arg(0) {
	case "unary":
		unary(rs, flag.Args()[1:])
	case "lifecycle":
		lifecycle(rs, flag.Args()[1:])
	case "createremove":
		createRemove(rs, flag.Args()[1:])
	case "cleanup":
		cleanup(rs)
	default:
		fmt.Fprintf(os.Stderr, "nri_mode_client: unknown command %q\n", flag.Arg(0))
		os.Exit(2)
	}
}
