package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
)

// TestMakeRelease runs make release as a user would, twice, and reads back what it wrote: the images
// load with the versioned tag and the checkout's commit, install.yaml runs that image, the chart carries
// the version, and the second run wrote the same images and install.yaml, byte for byte. (The chart's
// package is not compared: helm stamps its archive with the time it was written.)
func TestMakeRelease(t *testing.T) {
	const version = "0.0.1-test"
	revision, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	must(t, err)
	var dists []string
	for range 2 {
		dist := t.TempDir()
		// One platform for the plugin: the others are cross-builds of the same code.
		cmd := exec.Command("make", "-C", root, "release", "VERSION="+version, "DIST="+dist, "REPOSITORY_PREFIX=registry.example/cg",
			"PLUGIN_PLATFORMS=linux/"+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make release: %v\n%s", err, out)
		}
		dists = append(dists, dist)
	}
	for _, f := range []string{"consumergroup-operator.tar", "consumergroup-agent.tar", "install.yaml", "kubectl-cg_linux_" + runtime.GOARCH + ".tar.gz", "kubectl-cg.yaml"} {
		a, err := os.ReadFile(filepath.Join(dists[0], f))
		must(t, err)
		b, err := os.ReadFile(filepath.Join(dists[1], f))
		must(t, err)
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs of make release on the same commit", f)
		}
	}
	dist := dists[0]

	for _, p := range programs {
		ref, err := name.NewTag("registry.example/cg/" + p.Image + ":" + version)
		must(t, err)
		img, err := tarball.ImageFromPath(filepath.Join(dist, p.Image+".tar"), &ref)
		if err != nil {
			t.Fatalf("%s.tar holds no %s: %v", p.Image, ref, err)
		}
		cf, err := img.ConfigFile()
		must(t, err)
		if got := cf.Config.Labels["org.opencontainers.image.revision"]; got != strings.TrimSpace(string(revision)) {
			t.Errorf("%s: revision label %q, want the checkout's %s", p.Image, got, revision)
		}
	}

	install, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
	must(t, err)
	objs := decodeAll(t, install)
	if len(objs) == 0 || objs[0].GetKind() != "Namespace" {
		t.Errorf("install.yaml does not start with its Namespace, so kubectl apply -f would fail on an empty cluster")
	}
	var dep appsv1.Deployment
	for _, d := range find(objs, "Deployment") {
		as(t, d, &dep)
	}
	if got, want := dep.Spec.Template.Spec.Containers[0].Image, "registry.example/cg/consumergroup-operator:"+version; got != want {
		t.Errorf("install.yaml runs %q, want %q", got, want)
	}

	// The krew manifest names the plugin's archive by its checksum, and the archive holds kubectl-cg.
	var manifest struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Version   string
			Platforms []struct {
				Selector         struct{ MatchLabels map[string]string } `json:"selector"`
				URI, SHA256, Bin string
			}
		}
	}
	readYAML(t, filepath.Join(dist, "kubectl-cg.yaml"), &manifest)
	archive, err := os.ReadFile(filepath.Join(dist, "kubectl-cg_linux_"+runtime.GOARCH+".tar.gz"))
	must(t, err)
	sum := sha256.Sum256(archive)
	if manifest.Kind != "Plugin" || manifest.Metadata.Name != "cg" || manifest.Spec.Version != "v"+version || len(manifest.Spec.Platforms) != 1 {
		t.Fatalf("krew manifest %+v", manifest)
	}
	pl := manifest.Spec.Platforms[0]
	if pl.SHA256 != hex.EncodeToString(sum[:]) || pl.Bin != "kubectl-cg" || pl.Selector.MatchLabels["os"] != "linux" ||
		!strings.HasSuffix(pl.URI, "/v"+version+"/kubectl-cg_linux_"+runtime.GOARCH+".tar.gz") {
		t.Errorf("krew manifest platform %+v, want the archive's sha256 %x", pl, sum)
	}
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	must(t, err)
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	must(t, err)
	exe := filepath.Join(t.TempDir(), "kubectl-cg")
	data, err := io.ReadAll(tr)
	must(t, err)
	must(t, os.WriteFile(exe, data, 0o755))
	if h.Name != "kubectl-cg" || h.Mode != 0o755 {
		t.Errorf("the plugin's archive holds %s (mode %o), want kubectl-cg, executable", h.Name, h.Mode)
	}
	if out, err := exec.Command(exe, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "kubectl-cg "+version) {
		t.Errorf("kubectl-cg --version: %v\n%s", err, out)
	}

	ch, err := loader.Load(filepath.Join(dist, "consumergroup-operator-"+version+".tgz"))
	must(t, err)
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != version {
		t.Errorf("the chart's version %s, appVersion %s, want %s", ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
}
