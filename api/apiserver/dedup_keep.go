package apiserver

import (
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/annexd/annexd/api"
)

// keepParams reads keep= and data_home=, and refuses hardlink with trash.
// The daemon checks the rule itself; the data home must be absolute.
func keepParams(v url.Values, req api.DedupRequest) (keep string, dataHome []byte, err error) {
	if req.Hardlink && req.Trash {
		return "", nil, fmt.Errorf("%w: give hardlink or trash, not both", api.ErrBadRequest)
	}
	if h := v.Get("data_home"); h != "" {
		if !filepath.IsAbs(h) {
			return "", nil, fmt.Errorf("%w: data_home %q is not absolute", api.ErrBadRequest, h)
		}
		dataHome = []byte(filepath.Clean(h))
	}
	return v.Get("keep"), dataHome, nil
}
