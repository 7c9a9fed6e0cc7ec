// gocri is a CRI client built on grpc-go that dials a CRI socket the way
// kubelet does, so crihookd is tested against the client library kubelet
// really uses (grpc-go), not only against gRPC C++.
//
// kubelet <= 1.29 dials the socket path itself as the gRPC target with a
// custom Unix dialer, so grpc-go sends the path as :authority
// ("-authority-mode path"); kubelet >= 1.30 sets grpc.WithAuthority("localhost")
// ("-authority-mode localhost").
//
// Each step prints one JSON line; the first failing step prints its gRPC code
// and message and the command exits with status 1.
//
//	gocri -endpoint SOCK [-authority-mode path|localhost] version
//	gocri -endpoint SOCK [-authority-mode path|localhost] lifecycle -image NAME [-pod NAME] [-log-dir DIR]
//	gocri -endpoint SOCK bench [-calls N] [-conns C] [-streams S] [-gap D]
//	gocri -endpoint SOCK koordhook
//
// bench: Version calls from C connections, S goroutines on each (one
// connection carrying S concurrent streams, as kubelet's does), N calls in
// all after a warm-up, each caller waiting D between its calls (kubelet's
// calls are spaced, not back to back; default none); prints one JSON line
// with the p50 and p99 latency in microseconds and the calls per second.
//
// koordhook: serves Koordinator's RuntimeHookService (runtime.v1alpha1) on
// SOCK with grpc-go, as koordlet's hook server does, until killed:
// PreRunPodSandboxHook adds the label go-hook=grpc-go; PreCreateContainerHook
// answers the container's environment with GO_HOOK=grpc-go added and
// cpuset_cpus "0-1" - or, for a pod named "refuse", FailedPrecondition with a
// message that is not ASCII, and for a pod named "slow", the same answer
// after 3 s. The other RPCs echo nothing. Prints {"step":"koordhook"} once it
// serves.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"google.golang.org/grpc/codes"

	cri "crihook/cri"
	koord "crihook/koord"
)

var (
	endpoint      = flag.String("endpoint", "", "CRI Unix socket path")
	authorityMode = flag.String("authority-mode", "path", "path (kubelet <= 1.29) or localhost (kubelet >= 1.30)")
	timeout       = flag.Duration("timeout", 60*time.Second, "deadline of each call")
)

// report prints one step's result as a JSON line.
func report(step string, fields map[string]interface{}) {
	line := map[string]interface{}{"step": step, "ok": true}
	for k, v := range fields {
		line[k] = v
	}
	out, _ := json.Marshal(line)
	fmt.Println(string(out))
}

// check ends the program on a failed step, naming the step and the gRPC code.
func check(step string, err error) {
	if err == nil {
		return
	}
	st := status.Convert(err)
	out, _ := json.Marshal(map[string]interface{}{
		"step": step, "ok": false, "code": st.Code().String(), "message": st.Message(),
	})
	fmt.Println(string(out))
	os.Exit(1)
}

func dial() *grpc.ClientConn {
	// As kubelet's util.GetAddressAndDialer + remote.NewRemoteRuntimeService:
	// the target is the socket path, the dialer ignores it.
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", *endpoint)
	}
	opts := []grpc.DialOption{grpc.WithInsecure(), grpc.WithContextDialer(dialer), grpc.WithBlock()}
	switch *authorityMode {
	case "path":
	case "localhost":
		opts = append(opts, grpc.WithAuthority("localhost"))
	default:
		fmt.Fprintf(os.Stderr, "gocri: -authority-mode: expected path or localhost, got %q\n", *authorityMode)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, *endpoint, opts...)
	check("Dial", err)
	return conn
}

func call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), *timeout)
}

func version(rs cri.RuntimeServiceClient) {
	ctx, cancel := call()
	defer cancel()
	v, err := rs.Version(ctx, &cri.VersionRequest{Version: "v1"})
	check("Version", err)
	report("Version", map[string]interface{}{
		"runtime_name": v.GetRuntimeName(), "runtime_api_version": v.GetRuntimeApiVersion(),
	})
}

func lifecycle(rs cri.RuntimeServiceClient, args []string) {
	fs := flag.NewFlagSet("lifecycle", flag.ExitOnError)
	image := fs.String("image", "", "image of the container (present on the node)")
	pod := fs.String("pod", "gocri-pod", "pod name")
	logDir := fs.String("log-dir", os.TempDir(), "the pod's log directory")
	fs.Parse(args)
	if *image == "" {
		fmt.Fprintln(os.Stderr, "gocri lifecycle: -image is required")
		os.Exit(2)
	}
	version(rs)

	podConfig := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: *pod, Namespace: "default", Uid: *pod + "-uid"},
		LogDirectory: *logDir,
		Annotations:  map[string]string{"crihook.test/gocri": "true"},
		// No CNI in the tests: the pod uses the node's network.
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE},
		}},
	}
	ctx, cancel := call()
	defer cancel()
	run, err := rs.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: podConfig})
	check("RunPodSandbox", err)
	podID := run.GetPodSandboxId()
	report("RunPodSandbox", map[string]interface{}{"pod_sandbox_id": podID})

	create, err := rs.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId: podID,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: "box"},
			Image:    &cri.ImageSpec{Image: *image},
			Command:  []string{"/bin/sleep"},
			Args:     []string{"3600"},
			LogPath:  "box.log",
		},
		SandboxConfig: podConfig,
	})
	check("CreateContainer", err)
	ctrID := create.GetContainerId()
	report("CreateContainer", map[string]interface{}{"container_id": ctrID})

	_, err = rs.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctrID})
	check("StartContainer", err)
	report("StartContainer", nil)

	cs, err := rs.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: ctrID})
	check("ContainerStatus", err)
	report("ContainerStatus", map[string]interface{}{
		"state": cs.GetStatus().GetState().String(), "name": cs.GetStatus().GetMetadata().GetName(),
		"image": cs.GetStatus().GetImage().GetImage(),
	})

	exec, err := rs.ExecSync(ctx, &cri.ExecSyncRequest{
		ContainerId: ctrID, Cmd: []string{"echo", "hi"}, Timeout: 20,
	})
	check("ExecSync", err)
	report("ExecSync", map[string]interface{}{
		"stdout": string(exec.GetStdout()), "stderr": string(exec.GetStderr()),
		"exit_code": exec.GetExitCode(),
	})

	list, err := rs.ListContainers(ctx, &cri.ListContainersRequest{
		Filter: &cri.ContainerFilter{PodSandboxId: podID},
	})
	check("ListContainers", err)
	ids := []string{}
	for _, c := range list.GetContainers() {
		ids = append(ids, c.GetId())
	}
	report("ListContainers", map[string]interface{}{"container_ids": ids})

	_, err = rs.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: ctrID, Timeout: 2})
	check("StopContainer", err)
	cs, err = rs.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: ctrID})
	check("ContainerStatus", err)
	report("StopContainer", map[string]interface{}{"state": cs.GetStatus().GetState().String()})

	_, err = rs.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: ctrID})
	check("RemoveContainer", err)
	report("RemoveContainer", nil)

	_, err = rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: podID})
	check("StopPodSandbox", err)
	ps, err := rs.PodSandboxStatus(ctx, &cri.PodSandboxStatusRequest{PodSandboxId: podID})
	check("PodSandboxStatus", err)
	report("StopPodSandbox", map[string]interface{}{"state": ps.GetStatus().GetState().String()})

	_, err = rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: podID})
	check("RemovePodSandbox", err)
	report("RemovePodSandbox", nil)
}

func bench(args []string) {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	calls := fs.Int("calls", 4000, "Version calls in all")
	conns := fs.Int("conns", 1, "connections")
	streams := fs.Int("streams", 1, "concurrent callers on each connection")
	gap := fs.Duration("gap", 0, "wait between one caller's calls")
	fs.Parse(args)
	workers := *conns * *streams
	if workers < 1 || *calls < workers {
		fmt.Fprintln(os.Stderr, "gocri bench: need -conns, -streams >= 1 and -calls >= conns*streams")
		os.Exit(2)
	}
	clients := make([]cri.RuntimeServiceClient, *conns)
	for i := range clients {
		conn := dial()
		defer conn.Close()
		clients[i] = cri.NewRuntimeServiceClient(conn)
	}
	one := func(rs cri.RuntimeServiceClient) error {
		ctx, cancel := call()
		defer cancel()
		_, err := rs.Version(ctx, &cri.VersionRequest{Version: "v1"})
		return err
	}
	for _, rs := range clients { // warm each connection
		for i := 0; i < 20; i++ {
			check("Version", one(rs))
		}
	}
	per := *calls / workers
	latencies := make([][]time.Duration, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rs := clients[w%*conns]
			l := make([]time.Duration, 0, per)
			for i := 0; i < per; i++ {
				t0 := time.Now()
				if err := one(rs); err != nil {
					errs[w] = err
					return
				}
				l = append(l, time.Since(t0))
				if *gap > 0 {
					time.Sleep(*gap)
				}
			}
			latencies[w] = l
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := []time.Duration{}
	for w := range latencies {
		check("Version", errs[w])
		all = append(all, latencies[w]...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	at := func(p float64) float64 {
		return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1000
	}
	report("bench", map[string]interface{}{
		"calls": len(all), "conns": *conns, "streams": *streams,
		"p50_us": at(0.5), "p99_us": at(0.99),
		"calls_per_s": float64(len(all)) / elapsed.Seconds(),
	})
}

type koordHook struct{}

func (koordHook) PreRunPodSandboxHook(ctx context.Context, req *koord.PodSandboxHookRequest) (*koord.PodSandboxHookResponse, error) {
	labels := map[string]string{"go-hook": "grpc-go"}
	for k, v := range req.Labels {
		labels[k] = v
	}
	return &koord.PodSandboxHookResponse{Labels: labels}, nil
}

func (koordHook) PreCreateContainerHook(ctx context.Context, req *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	switch req.GetPodMeta().GetName() {
	case "refuse":
		return nil, status.Error(codes.FailedPrecondition, "refused by the grpc-go hook server: pod gehört nicht hierher")
	case "slow":
		time.Sleep(3 * time.Second)
	}
	envs := map[string]string{"GO_HOOK": "grpc-go"}
	for k, v := range req.ContainerEnvs {
		envs[k] = v
	}
	return &koord.ContainerResourceHookResponse{
		ContainerEnvs:      envs,
		ContainerResources: &koord.LinuxContainerResources{CpusetCpus: "0-1"},
	}, nil
}

func (koordHook) PostStopPodSandboxHook(context.Context, *koord.PodSandboxHookRequest) (*koord.PodSandboxHookResponse, error) {
	return &koord.PodSandboxHookResponse{}, nil
}

func (koordHook) PreStartContainerHook(context.Context, *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return &koord.ContainerResourceHookResponse{}, nil
}

func (koordHook) PostStartContainerHook(context.Context, *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return &koord.ContainerResourceHookResponse{}, nil
}

func (koordHook) PostStopContainerHook(context.Context, *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return &koord.ContainerResourceHookResponse{}, nil
}

func (koordHook) PreUpdateContainerResourcesHook(context.Context, *koord.ContainerResourceHookRequest) (*koord.ContainerResourceHookResponse, error) {
	return &koord.ContainerResourceHookResponse{}, nil
}

func koordhook() {
	os.Remove(*endpoint)
	l, err := net.Listen("unix", *endpoint)
	check("koordhook", err)
	s := grpc.NewServer()
	koord.RegisterRuntimeHookServiceServer(s, koordHook{})
	report("koordhook", map[string]interface{}{"listening": *endpoint})
	check("koordhook", s.Serve(l))
}

func main() {
	flag.Parse()
	if *endpoint == "" || flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: gocri -endpoint SOCK [-authority-mode path|localhost] version|lifecycle|bench|koordhook ...")
		os.Exit(2)
	}
	if flag.Arg(0) == "koordhook" {
		koordhook()
		return
	}
	conn := dial()
	defer conn.Close()
	rs := cri.NewRuntimeServiceClient(conn)
	switch flag.Arg(0) {
	case "version":
		version(rs)
	case "lifecycle":
		lifecycle(rs, flag.Args()[1:])
	case "bench":
		bench(flag.Args()[1:])
	default:
		fmt.Fprintf(os.Stderr, "gocri: unknown command %q\n", flag.Arg(0))
		os.Exit(2)
	}
}
