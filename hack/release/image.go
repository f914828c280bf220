package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// nonroot is the user and group every image runs as, as in the distroless images: not root, and the same
// number in every release so that a PodSecurityContext can name it.
const nonroot = 65532

// source is the repository the images' labels point to.
const source = "https://github.com/consumergroup-operator/consumergroup-operator"

// imageSpec says what one image holds and how it is labelled.
type imageSpec struct {
	// Title names the program (org.opencontainers.image.title), e.g. consumergroup-operator.
	Title string
	// Binary is the static linux binary to ship, and Entrypoint where it lands in the image.
	Binary, Entrypoint string
	// Arch is the binary's GOARCH.
	Arch string
	// Version and Revision are the release and the commit it was built from.
	Version, Revision string
	// Created is the commit's time: every timestamp in the image is this one, so that the same commit
	// builds the same digest.
	Created time.Time
}

// buildImage assembles spec's image from nothing pulled: a base layer with the few files a non-root static
// binary expects (baseLayer), then the binary.
func buildImage(spec imageSpec) (v1.Image, error) {
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return nil, err
	}
	base, err := layer(spec.Created, baseFiles())
	if err != nil {
		return nil, err
	}
	app, err := layer(spec.Created, []file{{Path: spec.Entrypoint, Mode: 0o755, Content: bin}})
	if err != nil {
		return nil, err
	}
	// Docker's media types, which the tarball keeps: the digest printed is the one the image has once
	// loaded or pushed from the tarball.
	created := v1.Time{Time: spec.Created}
	img, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "consumergroup-operator release: base files", Comment: "passwd, group, /tmp"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "consumergroup-operator release: " + spec.Entrypoint}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", spec.Arch, created
	cf.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cf.Config.Entrypoint = []string{spec.Entrypoint}
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/", "HOME=/home/nonroot"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    spec.Title,
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  spec.Version,
		"org.opencontainers.image.revision": spec.Revision,
		"org.opencontainers.image.created":  spec.Created.UTC().Format(time.RFC3339),
	}
	return mutate.ConfigFile(img, cf)
}

// writeImage writes img as a tarball that docker load, kind load image-archive and ctr images import
// read, tagged ref.
func writeImage(p string, ref name.Tag, img v1.Image) error {
	return tarball.WriteToFile(p, ref, img)
}

// file is one entry of a layer: a regular file holding Content, or a directory when Dir is set; owned
// by UID, as user and group.
type file struct {
	Path    string
	Mode    int64
	Dir     bool
	UID     int
	Content []byte
}

// baseFiles are what a distroless static image gives a non-root program: a passwd and group naming the
// user, a home and a writable /tmp.
func baseFiles() []file {
	return []file{
		{Path: "etc", Mode: 0o755, Dir: true},
		{Path: "etc/group", Mode: 0o644, Content: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "etc/passwd", Mode: 0o644, Content: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "home", Mode: 0o755, Dir: true},
		{Path: "home/nonroot", Mode: 0o700, Dir: true, UID: nonroot},
		{Path: "tmp", Mode: 0o1777, Dir: true},
	}
}

// layer packs files into a layer (tarFiles), which go-containerregistry compresses and digests.
func layer(mtime time.Time, files []file) (v1.Layer, error) {
	data, err := tarFiles(mtime, files)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// tarFiles packs files, in the order given, into an uncompressed tar with every time set to mtime, so
// that the same files give the same bytes. It is built here, with archive/tar, because
// go-containerregistry's own helper (crane.Layer) cannot set a file's mode, and a binary must be
// executable.
func tarFiles(mtime time.Time, files []file) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(path.Clean(f.Path), "/"),
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.UID,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Content))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := w.Write(f.Content); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
