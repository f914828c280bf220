package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const root = "../.."

// buildStatic builds the programs as make images does, stamped as release version at revision, into a
// temporary folder.
func buildStatic(t *testing.T, version, revision string, created time.Time) string {
	t.Helper()
	dir := t.TempDir()
	const pkg = "github.com/consumergroup-operator/consumergroup-operator/internal/version"
	ldflags := "-s -w -X " + pkg + ".Version=" + version + " -X " + pkg + ".Commit=" + revision + " -X " + pkg + ".Date=" + created.Format(time.RFC3339)
	for _, target := range []struct{ out, pkg string }{{"manager", "."}, {"consumergroup-agent", "./cmd/consumergroup-agent"}} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(dir, target.out), target.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", target.pkg, err, out)
		}
	}
	return dir
}

// TestImages builds both images twice from the same binaries, reads the tarballs back, checks what they
// declare, and runs the binary each carries.
func TestImages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the images' binaries are linux binaries; this test runs them")
	}
	const version, revision = "0.9.1-test", "0123456789abcdef0123456789abcdef01234567"
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	bin := buildStatic(t, version, revision, created)
	out := t.TempDir()
	for _, p := range programs {
		t.Run(p.Image, func(t *testing.T) {
			spec := imageSpec{Title: p.Image, Binary: filepath.Join(bin, p.Binary), Entrypoint: p.Entrypoint,
				Arch: runtime.GOARCH, Version: version, Revision: revision, Created: created}
			ref, err := name.NewTag("ghcr.io/consumergroup-operator/" + p.Image + ":" + version)
			must(t, err)

			// Reproducible: the same inputs give the same digest and the same tarball, byte for byte.
			var digests []v1.Hash
			var sums [][32]byte
			for i := range 2 {
				img, err := buildImage(spec)
				must(t, err)
				d, err := img.Digest()
				must(t, err)
				digests = append(digests, d)
				path := filepath.Join(out, p.Image+string(rune('a'+i))+".tar")
				must(t, writeImage(path, ref, img))
				data, err := os.ReadFile(path)
				must(t, err)
				sums = append(sums, sha256.Sum256(data))
			}
			if digests[0] != digests[1] || sums[0] != sums[1] {
				t.Fatalf("two builds differ: digests %v and %v, tarball sums %x and %x", digests[0], digests[1], sums[0], sums[1])
			}

			img, err := tarball.ImageFromPath(filepath.Join(out, p.Image+"a.tar"), &ref)
			must(t, err)
			if d, err := img.Digest(); err != nil || d != digests[0] {
				t.Errorf("the tarball's image has digest %v (%v), built %v", d, err, digests[0])
			}
			cf, err := img.ConfigFile()
			must(t, err)
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
				t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
			}
			if cf.Config.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532", cf.Config.User)
			}
			if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != p.Entrypoint {
				t.Errorf("entrypoint %q, want [%s]", cf.Config.Entrypoint, p.Entrypoint)
			}
			for k, want := range map[string]string{
				"org.opencontainers.image.source":   source,
				"org.opencontainers.image.version":  version,
				"org.opencontainers.image.revision": revision,
				"org.opencontainers.image.title":    p.Image,
			} {
				if got := cf.Config.Labels[k]; got != want {
					t.Errorf("label %s = %q, want %q", k, got, want)
				}
			}
			if !cf.Created.Time.Equal(created) {
				t.Errorf("created %v, want the commit's time %v", cf.Created.Time, created)
			}

			files := extract(t, img)
			entry := strings.TrimPrefix(p.Entrypoint, "/")
			h, ok := files[entry]
			if !ok {
				t.Fatalf("the image has no %s", p.Entrypoint)
			}
			if h.Mode != 0o755 || h.Uid != 0 {
				t.Errorf("%s: mode %o uid %d, want 755 owned by root (the user runs it, cannot change it)", entry, h.Mode, h.Uid)
			}
			if d := files["tmp"]; d == nil || d.Typeflag != tar.TypeDir || d.Mode != 0o1777 {
				t.Errorf("/tmp is %+v, want a directory of mode 1777", d)
			}
			if pw := files["etc/passwd"]; pw == nil || !strings.Contains(string(pw.content), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd does not name user 65532")
			}

			// The binary the image carries is the one built, and runs.
			exe := filepath.Join(t.TempDir(), p.Binary)
			must(t, os.WriteFile(exe, h.content, 0o755))
			got, err := exec.Command(exe, "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v\n%s", p.Entrypoint, err, got)
			}
			for _, want := range []string{version, "commit: " + revision, "built: " + created.Format(time.RFC3339)} {
				if !strings.Contains(string(got), want) {
					t.Errorf("%s --version printed %q, want it to contain %q", p.Entrypoint, got, want)
				}
			}
		})
	}
}

type extracted struct {
	*tar.Header
	content []byte
}

// extract flattens img's layers into the files a container would see, by path.
func extract(t *testing.T, img v1.Image) map[string]*extracted {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	files := map[string]*extracted{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		must(t, err)
		var buf bytes.Buffer
		_, err = io.Copy(&buf, tr)
		must(t, err)
		files[strings.TrimSuffix(h.Name, "/")] = &extracted{Header: h, content: buf.Bytes()}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
