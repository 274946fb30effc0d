package apiserver

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's own request metrics.
type metrics struct {
	requests *prometheus.CounterVec   // by route and status code
	duration *prometheus.HistogramVec // by route
	lookups  *prometheus.CounterVec   // by lookup state
	denied   *prometheus.CounterVec   // by reason (uid, busy, token)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "annexd_api_requests_total",
			Help: "API requests by route and HTTP status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "annexd_api_request_duration_seconds",
			Help:    "API request duration by route (streams: until the last byte).",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2, 10, 60},
		}, []string{"route"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "annexd_api_lookups_total",
			Help: "Paths looked up through the API, by result state.",
		}, []string{"state"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "annexd_api_denied_total",
			Help: "API connections or requests refused: wrong peer uid (at accept), too many connections (busy), wrong token.",
		}, []string{"reason"}),
	}
	var err error
	m.requests, err = register(reg, m.requests)
	if err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.lookups, err = register(reg, m.lookups); err != nil {
		return nil, err
	}
	if m.denied, err = register(reg, m.denied); err != nil {
		return nil, err
	}
	return m, nil
}

// watchConns exports the admitted connections as a gauge.
func (m *metrics) watchConns(reg prometheus.Registerer, a *admission) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "annexd_api_connections",
		Help: "API connections open now (admitted ones; refused ones are closed at once).",
	}, func() float64 { return float64(a.open()) })
	_, err := register(reg, g)
	return err
}

// register registers c, or returns the collector already registered under
// the same description (a second server on one registry shares them).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old, nil
			}
		}
		return c, err
	}
	return c, nil
}

// instrument counts and times requests to route.
func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	dur := m.duration.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		dur.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
	})
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Flush passes flushes through for streams.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
