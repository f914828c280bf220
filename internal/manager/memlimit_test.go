package manager

import (
	"errors"
	"io/fs"
	"testing"
)

func TestSoftMemoryLimitIsNineTenthsOfTheContainersLimit(t *testing.T) {
	errDenied := errors.New("permission denied")
	for _, tc := range []struct {
		name    string
		env     string
		files   map[string]string
		readErr error
		want    int64
		wantErr bool
	}{
		{name: "cgroup v2 limit", files: map[string]string{cgroupV2MemoryMax: "536870912\n"}, want: 483183820},
		{name: "cgroup v2 without a limit", files: map[string]string{cgroupV2MemoryMax: "max\n"}, want: 0},
		{name: "cgroup v1 limit", files: map[string]string{cgroupV1MemoryMax: "1073741824\n"}, want: 966367641},
		{name: "cgroup v1 without a limit", files: map[string]string{cgroupV1MemoryMax: "9223372036854771712\n"}, want: 0},
		{name: "no cgroup files", files: map[string]string{}, want: 0},
		{name: "GOMEMLIMIT set: the runtime's own", env: "400MiB", files: map[string]string{cgroupV2MemoryMax: "536870912"}, want: 0},
		{name: "unreadable", files: map[string]string{cgroupV2MemoryMax: "junk"}, wantErr: true},
		{name: "cannot be read", readErr: errDenied, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.env
				}
				return ""
			}
			readFile := func(name string) ([]byte, error) {
				if tc.readErr != nil {
					return nil, tc.readErr
				}
				if data, ok := tc.files[name]; ok {
					return []byte(data), nil
				}
				return nil, fs.ErrNotExist
			}
			got, err := SoftMemoryLimit(getenv, readFile)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("SoftMemoryLimit = %d, %v; want %d (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestGCPercentIsTheFlagsUnlessGOGCIsSet(t *testing.T) {
	for _, tc := range []struct {
		gogc    string
		want    int
		wantSet bool
	}{
		{gogc: "", want: 40, wantSet: true},
		{gogc: "100", wantSet: false},
		{gogc: "off", wantSet: false},
	} {
		got, set := GCPercent(func(k string) string {
			if k == "GOGC" {
				return tc.gogc
			}
			return ""
		}, 40)
		if got != tc.want || set != tc.wantSet {
			t.Errorf("GOGC %q: GCPercent = %d, %t; want %d, %t", tc.gogc, got, set, tc.want, tc.wantSet)
		}
	}
}
