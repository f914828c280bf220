//go:build scale

package scale

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// adminKubeconfig writes a kubeconfig for a system:masters user of c's API server, for the operator
// process.
func adminKubeconfig(tb testing.TB, c *cluster) string {
	tb.Helper()
	user, err := c.env.AddUser(envtest.User{Name: "scale", Groups: []string{"system:masters"}}, nil)
	must(tb, err)
	kc, err := user.KubeConfig()
	must(tb, err)
	path := filepath.Join(tb.TempDir(), "kubeconfig")
	must(tb, os.WriteFile(path, kc, 0o600))
	return path
}

// operatorProcess is the operator running as its own process, as in a cluster.
type operatorProcess struct {
	cmd        *exec.Cmd
	metricsURL string
	logPath    string
	exited     chan struct{}
	err        error
}

// startOperator runs bin against kubeconfig, logging to logPath (appended to), until stop or the end of tb.
func startOperator(tb testing.TB, bin, kubeconfig, logPath string) *operatorProcess {
	tb.Helper()
	metricsAddr, probeAddr := freeAddr(tb), freeAddr(tb)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(tb, err)
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig,
		// Plain HTTP on loopback: the tests read the operator's metrics.
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--health-probe-bind-address", probeAddr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	must(tb, cmd.Start())
	p := &operatorProcess{cmd: cmd, metricsURL: "http://" + metricsAddr + "/metrics", logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	tb.Cleanup(func() { p.kill() })
	return p
}

// stop sends SIGTERM, as the kubelet does, and waits for the process to exit.
func (p *operatorProcess) stop(tb testing.TB) {
	tb.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			tb.Errorf("the operator exited with %v after SIGTERM; log: %s", p.err, p.logPath)
		}
	case <-time.After(30 * time.Second):
		p.kill()
		tb.Errorf("the operator did not exit within 30s of SIGTERM; log: %s", p.logPath)
	}
}

func (p *operatorProcess) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// memory reads the process's resident set size now (VmRSS) and at its peak (VmHWM), in bytes.
func (p *operatorProcess) memory(tb testing.TB) (rss, hwm int64) {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	must(tb, err)
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 3 || fields[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		must(tb, err)
		switch fields[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	must(tb, s.Err())
	if rss == 0 || hwm == 0 {
		tb.Fatalf("no VmRSS or VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	}
	return rss, hwm
}

// scrape reads the operator's metrics endpoint.
func (p *operatorProcess) scrape(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", p.metricsURL, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(tb, err)
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// metricSample is one line of the Prometheus text format.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

type metrics []metricSample

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseMetrics reads the Prometheus text format: enough of it for counters and gauges.
func parseMetrics(r io.Reader) (metrics, error) {
	var out metrics
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		smp := metricSample{name: m[1], labels: map[string]string{}, value: v}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			smp.labels[l[1]] = l[2]
		}
		out = append(out, smp)
	}
	return out, s.Err()
}

// sum adds the values of the samples called name whose labels pass keep (nil keeps all).
func (ms metrics) sum(name string, keep func(labels map[string]string) bool) float64 {
	total := 0.0
	for _, m := range ms {
		if m.name == name && (keep == nil || keep(m.labels)) {
			total += m.value
		}
	}
	return total
}
