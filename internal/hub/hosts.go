package hub

import (
	"sort"

	"github.com/annexd/annexd/internal/hubwire"
)

// Hosts lists every host the view knows, by name, as the hosts query
// answers it; nil until Ready. It reads memory only, for metrics.
func (h *Hub) Hosts() []hubwire.State {
	h.mu.Lock()
	v := h.view
	h.mu.Unlock()
	if v == nil {
		return nil
	}
	out := v.states()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
