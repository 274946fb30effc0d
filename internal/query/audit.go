package query

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/key"
)

// Audit answers the audit's part of the API (api.Auditor) in its types.
type Audit struct{ au Auditor }

var _ api.Auditor = Audit{}

// NewAudit answers for au.
func NewAudit(au Auditor) Audit { return Audit{au} }

// AuditStart implements api.Auditor.
func (x Audit) AuditStart(ctx context.Context, req api.AuditRequest) (uint64, error) {
	id, err := x.au.Start(ctx, audit.StartOptions{Paths: req.Paths, TimeLimit: req.TimeLimit, FullSpeed: req.FullSpeed})
	return id, auditError(err)
}

// AuditRun implements api.Auditor: a wait cut short by ctx answers with
// the run as it is.
func (x Audit) AuditRun(ctx context.Context, id uint64, wait bool) (api.AuditRun, error) {
	au := x.au
	if wait {
		s, err := au.WaitRun(ctx, id)
		if err == nil {
			return apiRun(s), nil
		}
		if ctx.Err() == nil {
			return api.AuditRun{}, auditError(err)
		}
	}
	s, err := au.Summary(id)
	if err != nil {
		return api.AuditRun{}, auditError(err)
	}
	return apiRun(s), nil
}

// auditError maps the audit's errors to the API's.
func auditError(err error) error {
	switch {
	case errors.Is(err, audit.ErrUnknownRun), errors.Is(err, audit.ErrNotFlagged), errors.Is(err, audit.ErrNotIndexed):
		return fmt.Errorf("%w: %w", api.ErrNotFound, err)
	case errors.Is(err, audit.ErrPath):
		return fmt.Errorf("%w: %w", api.ErrBadRequest, err)
	case errors.Is(err, audit.ErrStopped):
		return fmt.Errorf("%w: %w", api.ErrStarting, err) // or stopping: the client waits and asks again
	}
	return err
}

func apiRun(s audit.RunSummary) api.AuditRun {
	return api.AuditRun{ID: s.ID, Manual: s.Manual, FullSpeed: s.FullSpeed, TimeLimitSeconds: s.TimeLimit.Seconds(),
		Began: s.Began, Ended: s.Ended, StoppedBy: s.StoppedBy, Error: s.Err, Counts: s.Counts,
		Bytes: s.Bytes, Transient: s.Transient, CacheOnly: api.AuditCacheOnly{Files: s.CacheOnly, Bytes: s.CacheOnlyBytes},
		Left: api.AuditLeft(s.Left)}
}

// AuditStatus implements api.Auditor.
func (x Audit) AuditStatus(context.Context) (api.AuditStatus, error) {
	return apiAuditStatus(x.au.Status()), nil
}

func apiAuditStatus(s audit.Status) api.AuditStatus {
	out := api.AuditStatus{State: s.State, Reason: s.Reason, Rate: s.Rate, NextRun: s.NextRun, Problems: s.Problems,
		IOPriority: s.IOPriority, Totals: s.Totals, BytesVerified: s.BytesVerified, Transient: s.Transient,
		CacheOnly: api.AuditCacheOnly{Files: s.CacheOnly, Bytes: s.CacheOnlyBytes},
		Coverage: api.AuditCoverage{EverySeconds: s.Coverage.Every.Seconds(), Files: s.Coverage.Files, Bytes: s.Coverage.Bytes,
			Total: s.Coverage.Total, TotalBytes: s.Coverage.TotalBytes, Oldest: s.Coverage.Oldest, At: s.Coverage.At}}
	if s.Run != nil {
		r := apiRun(*s.Run)
		out.Run = &r
	}
	if p := s.Pass; p != nil {
		out.Pass = &api.AuditPass{ID: p.ID, Began: p.Began, Cutoff: p.Cutoff, Files: p.Files, Bytes: p.Bytes,
			Done: p.Done, DoneBytes: p.DoneBytes, Counts: p.Counts, ETASeconds: p.ETA.Seconds()}
	}
	if l := s.Last; l != nil {
		ps := apiPassSummary(*l)
		out.LastPass = &ps
	}
	return out
}

func apiPassSummary(l audit.PassSummary) api.AuditPassSummary {
	out := api.AuditPassSummary{ID: l.ID, Began: time.Unix(0, l.Began), Ended: time.Unix(0, l.Ended),
		Files: l.Files, Bytes: l.Bytes, Counts: l.Counts, BytesOK: l.OKBytes, Problems: l.Problems(), Unread: l.Unread}
	if c := l.Cover; c != nil {
		out.Coverage = &api.AuditCoverage{EverySeconds: time.Duration(c.Every).Seconds(), Files: c.Files, Bytes: c.Bytes,
			Total: c.Total, TotalBytes: c.TotalBytes, At: out.Ended}
	}
	if l.Left != nil {
		out.Left = api.AuditLeft(*l.Left)
	}
	return out
}

// AuditHistory implements api.Auditor.
func (x Audit) AuditHistory(context.Context) ([]api.AuditPassSummary, error) {
	h, err := x.au.History()
	if err != nil {
		return nil, err
	}
	out := make([]api.AuditPassSummary, len(h))
	for i, p := range h {
		out[i] = apiPassSummary(p)
	}
	return out, nil
}

// AuditProblems implements api.Auditor.
func (x Audit) AuditProblems(ctx context.Context, fn func(api.AuditProblem) error) error {
	return x.au.Problems(ctx, func(p audit.Problem) error {
		backend := ""
		if k, err := key.Parse(p.RecordedKey); err == nil {
			backend = k.Backend().String()
		}
		return fn(api.AuditProblem{Path: p.Path, State: p.Class.String(), Backend: backend, Recorded: p.Recorded,
			Observed: p.Observed, RecordedKey: p.RecordedKey, ObservedKey: p.ObservedKey, Size: p.Size, Seen: p.Seen, Why: p.Why})
	})
}

// AuditPause implements api.Auditor.
func (x Audit) AuditPause(ctx context.Context, paused bool) error {
	if paused {
		return auditError(x.au.Pause(ctx))
	}
	return auditError(x.au.Resume(ctx))
}

// AuditAccept implements api.Auditor.
func (x Audit) AuditAccept(ctx context.Context, path []byte) (api.AuditAcceptResult, error) {
	res, err := x.au.Accept(ctx, path)
	if err != nil {
		return api.AuditAcceptResult{}, auditError(err)
	}
	out := api.AuditAcceptResult{Accepted: res.Accepted, Released: res.Released}
	for i, p := range res.Failed {
		out.Failed = append(out.Failed, api.AuditAcceptFailure{Path: p, Error: res.Errs[i].Error()})
	}
	return out, nil
}

// Summary is the audit's part of the daemon's status: what it does and
// why, the problems, the coverage, the last pass and the next run.
func (x Audit) Summary() *api.AuditStatus {
	s := apiAuditStatus(x.au.Status())
	s.Run, s.Pass, s.Totals = nil, nil, nil
	return &s
}
