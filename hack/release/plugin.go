package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// pluginArchive is one platform's archive of kubectl-cg, as krew installs it.
type pluginArchive struct {
	OS, Arch, File, SHA256 string
}

// packPlugin writes, for each "os/arch" in platforms, kubectl-cg from bin/<os>-<arch>/kubectl-cg into
// out/kubectl-cg_<os>_<arch>.tar.gz (every time set to mtime, so the same binaries give the same bytes),
// and returns the archives.
func packPlugin(bin string, platforms []string, mtime time.Time, out string) ([]pluginArchive, error) {
	var archives []pluginArchive
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		exe, err := os.ReadFile(filepath.Join(bin, goos+"-"+goarch, "kubectl-cg"))
		if err != nil {
			return nil, err
		}
		tarball, err := tarFiles(mtime, []file{{Path: "kubectl-cg", Mode: 0o755, Content: exe}})
		if err != nil {
			return nil, err
		}
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		if _, err := w.Write(tarball); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		name := "kubectl-cg_" + goos + "_" + goarch + ".tar.gz"
		if err := os.WriteFile(filepath.Join(out, name), gz.Bytes(), 0o644); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(gz.Bytes())
		archives = append(archives, pluginArchive{OS: goos, Arch: goarch, File: name, SHA256: hex.EncodeToString(sum[:])})
	}
	return archives, nil
}

// krewManifest is the plugin's krew manifest (krew install --manifest=dist/kubectl-cg.yaml), for the
// archives as published under downloadURL.
var krewManifest = template.Must(template.New("krew").Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: cg
spec:
  version: v{{.Version}}
  homepage: https://github.com/consumergroup-operator/consumergroup-operator
  shortDescription: Inspect and steer consumer groups of consumergroup-operator
  description: |
    kubectl cg answers, from the live state of a cluster, who reads which message queue of a
    ConsumerGroup (describe, who-has), what a change would move (plan --replicas, --strategy, -f),
    and freezes a group's assignment for an incident (pause, resume).
  platforms:
{{- range .Archives}}
    - selector:
        matchLabels:
          os: {{.OS}}
          arch: {{.Arch}}
      uri: {{$.DownloadURL}}/{{.File}}
      sha256: {{.SHA256}}
      bin: kubectl-cg
{{- end}}
`))

func writeKrewManifest(path, version, downloadURL string, archives []pluginArchive) error {
	var buf bytes.Buffer
	if err := krewManifest.Execute(&buf, struct {
		Version, DownloadURL string
		Archives             []pluginArchive
	}{version, downloadURL, archives}); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
