package main

import (
	"bytes"
	"fmt"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// packageChart packages the chart in dir into out, as helm package would, with its version and appVersion
// set to version and its default image repository to repository; it returns the archive's path.
func packageChart(dir, version, repository, out string) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, version
	// Helm writes values.yaml as it was read, comments and all, so the default is replaced in its text.
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			from := []byte("repository: " + operatorRepository + "\n")
			if !bytes.Contains(f.Data, from) {
				return "", fmt.Errorf("%s/%s does not set the image repository to %s", dir, f.Name, operatorRepository)
			}
			f.Data = bytes.Replace(f.Data, from, []byte("repository: "+repository+"\n"), 1)
		}
	}
	if err := ch.Validate(); err != nil {
		return "", err
	}
	return chartutil.Save(ch, out)
}
