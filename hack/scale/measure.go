package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// operatorProcess is the operator running as its own process, as in a cluster.
type operatorProcess struct {
	cmd       *exec.Cmd
	logPath   string
	pprofAddr string
	// metricsAddr serves the operator's Prometheus metrics, over plain HTTP on the loopback.
	metricsAddr string
	exited      chan struct{}
}

// startOperator starts the operator's binary; gogc, when not empty, is its GOGC.
func startOperator(bin, kubeconfig, logPath, gogc string, extraArgs ...string) (*operatorProcess, error) {
	pprofAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Metrics over plain HTTP on the loopback, where only this machine reaches them, and probes on a port
	// of the kernel's choosing: the run reads the operator's passes and work queue, the API server's
	// metrics and the process's memory; its heap profile when asked to.
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig, "--metrics-bind-address", metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address", "127.0.0.1:0", "--pprof-bind-address", pprofAddr}, extraArgs...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = operatorEnv(os.Environ(), gogc)
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, err
	}
	p := &operatorProcess{cmd: cmd, logPath: logPath, pprofAddr: pprofAddr, metricsAddr: metricsAddr, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// operatorEnv is the operator's environment: this program's, with GOGC set to gogc, or without GOGC when
// gogc is empty, so that the operator's own default (--gc-percent) applies and not a GOGC this program
// was started with.
func operatorEnv(env []string, gogc string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
	if gogc != "" {
		env = append(env, "GOGC="+gogc)
	}
	return env
}

func (p *operatorProcess) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// memStats is what the operator's runtime says of its memory (runtime.MemStats, which the heap profile's
// text form ends with): HeapInuse, the bytes in its heap's spans in use (live objects and the garbage not
// yet collected); HeapIdle less HeapReleased, the spans freed but not yet returned to the kernel; StackInuse,
// its goroutines' stacks; NextGC, the heap size at which the next collection starts. RSS adds the binary's
// pages and the runtime's own structures.
type memStats struct {
	HeapInuse, HeapIdleUnreleased, StackInuse, NextGC int64
}

// memStats reads the operator's memStats from its heap profile.
func (p *operatorProcess) memStats(ctx context.Context) (memStats, error) {
	body, err := p.heapProfile(ctx, "?debug=1")
	if err != nil {
		return memStats{}, err
	}
	defer func() { _ = body.Close() }()
	text, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		return memStats{}, err
	}
	return memStatsOf(string(text))
}

// memStatsOf reads memStats from the "# Name = N" lines of a heap profile's text form ("# Stack = inuse /
// sys" gives StackInuse).
func memStatsOf(text string) (memStats, error) {
	v := map[string]int64{}
	for line := range strings.Lines(text) {
		name, value, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "# "), " = ")
		if !ok {
			continue
		}
		value, _, _ = strings.Cut(value, " /")
		if n, err := strconv.ParseInt(value, 10, 64); err == nil {
			v[name] = n
		}
	}
	for _, name := range []string{"HeapInuse", "HeapIdle", "HeapReleased", "Stack", "NextGC"} {
		if _, ok := v[name]; !ok {
			return memStats{}, fmt.Errorf("the operator's heap profile has no %s line", name)
		}
	}
	return memStats{HeapInuse: v["HeapInuse"], HeapIdleUnreleased: v["HeapIdle"] - v["HeapReleased"], StackInuse: v["Stack"], NextGC: v["NextGC"]}, nil
}

// saveHeapProfile writes the operator's heap profile (go tool pprof reads it) to path.
func (p *operatorProcess) saveHeapProfile(ctx context.Context, path string) error {
	return p.save(ctx, "http://"+p.pprofAddr+"/debug/pprof/heap", "heap profile", path)
}

// saveCPUProfile writes the operator's CPU profile over the next d (go tool pprof reads it) to path.
func (p *operatorProcess) saveCPUProfile(ctx context.Context, path string, d time.Duration) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprofAddr, max(int(d/time.Second), 1))
	return p.save(ctx, url, "CPU profile", path)
}

// save writes the body of what the operator serves at url (its what, for errors) to path.
func (p *operatorProcess) save(ctx context.Context, url, what, path string) error {
	body, err := p.get(ctx, url, what)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// heapProfile is the body of the operator's heap profile, with query ("?debug=1" for its text form).
func (p *operatorProcess) heapProfile(ctx context.Context, query string) (io.ReadCloser, error) {
	return p.get(ctx, "http://"+p.pprofAddr+"/debug/pprof/heap"+query, "heap profile")
}

// get is the body of what the operator serves at url, its what (for errors), once it answered 200.
func (p *operatorProcess) get(ctx context.Context, url, what string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the operator's %s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("reading the operator's %s: %s", what, resp.Status)
	}
	return resp.Body, nil
}

// groupQueue is what the operator's metrics say of its groups' passes and their work queue
// (controller-runtime's controller_runtime_reconcile_total, workqueue_depth and
// workqueue_queue_duration_seconds, for the consumergroup controller): the passes run so far, the groups
// waiting for one now, and the seconds the passes run so far waited in the queue, in all.
type groupQueue struct {
	Passes, Depth, WaitSeconds, Waits float64
}

// groupQueue reads the operator's groupQueue.
func (p *operatorProcess) groupQueue(ctx context.Context) (groupQueue, error) {
	body, err := p.get(ctx, "http://"+p.metricsAddr+"/metrics", "metrics")
	if err != nil {
		return groupQueue{}, err
	}
	defer func() { _ = body.Close() }()
	text, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		return groupQueue{}, fmt.Errorf("reading the operator's metrics: %w", err)
	}
	return groupQueueOf(text)
}

// groupControllerName is the controller whose passes and queue groupQueue reads.
const groupControllerName = "consumergroup"

// groupQueueOf reads groupQueue from the operator's metrics in the Prometheus text format.
func groupQueueOf(text []byte) (groupQueue, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return groupQueue{}, fmt.Errorf("reading the operator's metrics: %w", err)
	}
	var q groupQueue
	found := map[string]bool{}
	for _, f := range []struct {
		family, label string
		read          func(*dto.Metric)
	}{
		{"controller_runtime_reconcile_total", "controller", func(m *dto.Metric) { q.Passes += m.GetCounter().GetValue() }},
		{"workqueue_depth", "name", func(m *dto.Metric) { q.Depth += m.GetGauge().GetValue() }},
		{"workqueue_queue_duration_seconds", "name", func(m *dto.Metric) {
			q.WaitSeconds += m.GetHistogram().GetSampleSum()
			q.Waits += float64(m.GetHistogram().GetSampleCount())
		}},
	} {
		for _, m := range families[f.family].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == f.label && l.GetValue() == groupControllerName {
					f.read(m)
					found[f.family] = true
				}
			}
		}
		if !found[f.family] {
			return groupQueue{}, fmt.Errorf("the operator's metrics have no %s of %s", f.family, groupControllerName)
		}
	}
	return q, nil
}

// freeLoopbackAddr is a loopback address with a port nobody listens on now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// memory reads the process's resident set size now (VmRSS) and at its peak (VmHWM), in bytes.
func (p *operatorProcess) memory() (rss, hwm int64, err error) {
	select {
	case <-p.exited:
		return 0, 0, fmt.Errorf("the operator exited; its log: %s", p.logPath)
	default:
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	kb := procFields(status, "VmRSS:", "VmHWM:")
	if kb["VmRSS:"] == 0 || kb["VmHWM:"] == 0 {
		return 0, 0, fmt.Errorf("no VmRSS or VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	}
	// The kernel updates VmHWM lazily: a moment's VmRSS can be above it.
	return kb["VmRSS:"] << 10, max(kb["VmHWM:"], kb["VmRSS:"]) << 10, nil
}

// cpuSeconds is the CPU time the process has used so far, user and system, in seconds (/proc/<pid>/stat:
// utime and stime, in the kernel's fixed 100 ticks a second).
func (p *operatorProcess) cpuSeconds() (float64, error) {
	return procCPUSeconds(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
}

// procCPUSeconds is the CPU time of the process whose /proc stat file is statFile.
func procCPUSeconds(statFile string) (float64, error) {
	stat, err := os.ReadFile(statFile)
	if err != nil {
		return 0, err
	}
	return statCPUSeconds(stat)
}

// cpuShares is the CPU time, in seconds, that each part of the run has used so far: this program (the
// members, agents and kubelets it stands in for), and its child processes etcd and kube-apiserver. On a
// small machine they share the cores with the operator, and the shares show which of them the requests
// wait for.
type cpuShares struct {
	Program, APIServer, Etcd float64
}

// readCPUShares reads cpuShares from /proc: this process's stat, and those of its children named etcd
// and kube-apiserver (the kernel's short command names).
func readCPUShares() (cpuShares, error) {
	var c cpuShares
	var err error
	if c.Program, err = procCPUSeconds("/proc/self/stat"); err != nil {
		return c, err
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return c, err
	}
	pid := os.Getpid()
	for _, file := range stats {
		stat, err := os.ReadFile(file)
		if err != nil {
			continue // a process that exited meanwhile
		}
		name, f, err := statFields(stat)
		if ppid, ok := fieldsParent(f); err != nil || !ok || ppid != pid {
			continue
		}
		var into *float64
		switch name {
		case "kube-apiserver":
			into = &c.APIServer
		case "etcd":
			into = &c.Etcd
		default:
			continue
		}
		seconds, err := fieldsCPUSeconds(f, stat)
		if err != nil {
			return c, err
		}
		*into += seconds
	}
	return c, nil
}

// fieldsParent is the parent's pid among the fields statFields split from a /proc/<pid>/stat line.
func fieldsParent(f []string) (ppid int, ok bool) {
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// statCPUSeconds reads utime and stime from a /proc/<pid>/stat line.
func statCPUSeconds(stat []byte) (float64, error) {
	_, f, err := statFields(stat)
	if err != nil {
		return 0, err
	}
	return fieldsCPUSeconds(f, stat)
}

// statFields splits a /proc/<pid>/stat line into its command name and the fields after it. The name,
// in parentheses, may hold spaces and parentheses: the fields start after its last closing one, the
// first of them the line's third field (the state).
func statFields(stat []byte) (name string, fields []string, err error) {
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", nil, fmt.Errorf("no command name in %q", stat)
	}
	return string(stat[open+1 : end]), strings.Fields(string(stat[end+1:])), nil
}

// fieldsCPUSeconds adds utime and stime, the line's 14th and 15th fields, of the fields statFields split
// from stat, in the kernel's fixed 100 ticks a second.
func fieldsCPUSeconds(f []string, stat []byte) (float64, error) {
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name in %q, want more than %d", len(f), stat, stime)
	}
	var ticks int64
	for _, field := range []string{f[utime], f[stime]} {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("CPU ticks %q: %w", field, err)
		}
		ticks += n
	}
	return float64(ticks) / 100, nil
}

// procFields reads the "<name> <number> kB" lines of a /proc file (status, meminfo) that names asks for.
func procFields(text []byte, names ...string) map[string]int64 {
	out := map[string]int64{}
	s := bufio.NewScanner(bytes.NewReader(text))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 3 && f[2] == "kB" && slices.Contains(names, f[0]) {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				out[f[0]] = n
			}
		}
	}
	return out
}

// countRequests is cfg with every request counted in n.
func countRequests(cfg *rest.Config, n *atomic.Int64) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			n.Add(1)
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// apiRequests is the API server's count of the resource requests it served (apiserver_request_total),
// by "VERB resource[/subresource]".
func apiRequests(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	text, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseRequestTotals(text)
}

// parseRequestTotals reads apiserver_request_total from the Prometheus text format, summed by verb and
// resource. Requests for no resource (/metrics, /healthz, discovery) are left out.
func parseRequestTotals(text []byte) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	fam := families["apiserver_request_total"]
	if fam == nil {
		return nil, fmt.Errorf("the API server's metrics have no apiserver_request_total")
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == "" {
			continue
		}
		key := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// requestRates turns two counts of the API server's requests, own of which this program sent over
// seconds, into requests a second by verb and resource, and the rest per member a second.
func requestRates(before, after map[string]float64, own, seconds float64, members int) (map[string]float64, float64) {
	rates := map[string]float64{}
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			rates[k] = d / seconds
			total += d
		}
	}
	return rates, max(total-own, 0) / seconds / float64(members)
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkRoom refuses a run the machine has no room for, before it starts: each member pod costs the
// members' process, the API server and etcd together about perPod bytes (measured at 1,000 pods), and
// about filesPerNode open files a node, for which it raises the process's limit.
func checkRoom(o options, r result) error {
	const perPod = 400 << 10
	// Without /proc/meminfo (not Linux) available is 0 and the check passes: the watch during the run is
	// all there is.
	available := memAvailable()
	need := int64(r.Pods)*perPod + o.minAvailableMemory + 1<<30
	if available > 0 && available < need {
		return fmt.Errorf("not enough memory for %d pods: about %d MiB needed (%d KiB a pod, 1 GiB for the operator and the control plane, %d MiB kept free), %d MiB available",
			r.Pods, need>>20, perPod>>10, o.minAvailableMemory>>20, available>>20)
	}
	// Open files are room too: raised here, before the control plane starts and inherits the limit.
	_, err := raiseFileLimit(r.Nodes)
	return err
}

// memAvailable is the machine's available memory (MemAvailable), in bytes; 0 when it cannot be read.
func memAvailable() int64 {
	meminfo, _ := os.ReadFile("/proc/meminfo")
	return procFields(meminfo, "MemAvailable:")["MemAvailable:"] << 10
}

// watchRoom cancels the run, saying why, once the machine's available memory falls below minAvailable or
// the temporary directory (etcd's data) has less than 1 GiB free.
func watchRoom(ctx context.Context, minAvailable int64, cancel context.CancelCauseFunc) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if meminfo, err := os.ReadFile("/proc/meminfo"); err == nil {
			if available := procFields(meminfo, "MemAvailable:")["MemAvailable:"] << 10; available > 0 && available < minAvailable {
				cancel(fmt.Errorf("the machine ran out of memory: %d MiB available, below -min-available-memory (%d MiB); run fewer -pods", available>>20, minAvailable>>20))
				return
			}
		}
		var fs syscall.Statfs_t
		if err := syscall.Statfs(os.TempDir(), &fs); err == nil {
			if free := int64(fs.Bavail) * fs.Bsize; free < 1<<30 {
				cancel(fmt.Errorf("the machine ran out of disk: %d MiB free in %s, where etcd keeps its data; free some, or set TMPDIR", free>>20, os.TempDir()))
				return
			}
		}
	}
}
