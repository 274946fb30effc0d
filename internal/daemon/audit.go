package daemon

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// auditConfig maps the [audit] section to the audit's settings. A rate of
// config.Off is no cap, which the audit spells negative.
func auditConfig(c config.Audit) audit.Config {
	return audit.Config{
		Every:          c.Every.D(),
		Windows:        c.Windows,
		TimeLimit:      c.TimeLimit.D(),
		MaxRate:        int64(c.MaxRate),
		Workers:        c.Workers,
		MaxPressure:    c.MaxPressure,
		MaxLoad:        c.MaxLoad,
		IgnoreBattery:  c.IgnoreBattery,
		Jitter:         c.Jitter.D(),
		OnProblem:      c.OnProblem,
		OnProblemEvery: c.OnProblemEvery.D(),
		Disabled:       c.Disabled,
	}
}

// checkAudit checks the [audit] section with the audit's own rules (the
// run windows' syntax) and that the on_problem program exists, naming the
// file and the key.
func checkAudit(cfg *config.Config) error {
	for _, w := range cfg.Audit.Windows {
		c := audit.Config{Windows: []string{w}}
		c.Fill()
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%w: audit.windows = %q in %s: %s", config.ErrInvalid, w, cfgName(cfg),
				strings.TrimPrefix(err.Error(), audit.ErrConfig.Error()+": "))
		}
	}
	if argv := cfg.Audit.OnProblem; len(argv) > 0 {
		if _, err := exec.LookPath(argv[0]); err != nil {
			return fmt.Errorf("%w: audit.on_problem = %q in %s: %v; give a program on annexd's PATH or its absolute path",
				config.ErrInvalid, argv, cfgName(cfg), err)
		}
	}
	c := auditConfig(cfg.Audit)
	c.Fill()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: [audit] in %s: %w", config.ErrInvalid, cfgName(cfg), err)
	}
	return nil
}

func cfgName(cfg *config.Config) string {
	if cfg.File == "" {
		return "the defaults"
	}
	return cfg.File
}

// setupAudit builds the audit of the index. The indexer must exist: the
// audit hands it the files it finds changed, and waits while it works.
func (a *App) setupAudit(writes *ledger.Ledger, reg prometheus.Registerer) error {
	suspect := a.st.Suspect()
	au, err := audit.New(a.st, a.h, audit.Options{
		Config:     auditConfig(a.cfg.Audit),
		Indexer:    a.ix,
		Ledger:     writes,
		SyncWrites: a.w.Sync,
		// A record hashed just before an unclean end may name bytes that
		// never reached the disk: a digest that differs is a lost write.
		Crashes: audit.CrashesFunc(func(rec *store.Record) bool { return !store.Trusted(rec, suspect) }),
		Logger:  a.log.With("part", "audit"),
		OnRun:   a.auditBegan,
		Roots:   a.rootBytes(),
	})
	if err != nil {
		return err
	}
	a.audit.Store(au)
	return reg.Register(au.Collector())
}

// findingClass is the audit's class of each of the indexer's findings.
var findingClass = map[indexer.FindingKind]audit.Class{
	indexer.FoundLostWrite: audit.LostWrite,
	indexer.FoundCorrupt:   audit.Corrupt,
	indexer.FoundUntraced:  audit.Untraced,
}

// found files a finding of the indexer with the audit; the indexer is
// built first, so one found before the audit exists is only logged (by
// the indexer).
func (a *App) found(f indexer.Finding) {
	if au := a.audit.Load(); au != nil {
		au.Found(audit.Report{Path: f.Path, From: f.From, Class: findingClass[f.Kind], Was: f.Was, Now: f.Now,
			Observed: f.Digest})
	}
}

var _ api.Auditor = (*adapter)(nil)

// AuditStart implements api.Auditor.
func (x *adapter) AuditStart(ctx context.Context, req api.AuditRequest) (uint64, error) {
	id, err := x.a.audit.Load().Start(ctx, audit.StartOptions{Paths: req.Paths, TimeLimit: req.TimeLimit, FullSpeed: req.FullSpeed})
	return id, auditError(err)
}

// AuditRun implements api.Auditor: a wait cut short by ctx answers with
// the run as it is.
func (x *adapter) AuditRun(ctx context.Context, id uint64, wait bool) (api.AuditRun, error) {
	au := x.a.audit.Load()
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
		Bytes: s.Bytes, Transient: s.Transient, CacheOnly: api.AuditCacheOnly{Files: s.CacheOnly, Bytes: s.CacheOnlyBytes}}
}

// AuditStatus implements api.Auditor.
func (x *adapter) AuditStatus(context.Context) (api.AuditStatus, error) {
	return apiAuditStatus(x.a.audit.Load().Status()), nil
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
		out.LastPass = &api.AuditPassSummary{ID: l.ID, Began: time.Unix(0, l.Began), Ended: time.Unix(0, l.Ended),
			Files: l.Files, Bytes: l.Bytes, Counts: l.Counts}
	}
	return out
}

// AuditProblems implements api.Auditor.
func (x *adapter) AuditProblems(ctx context.Context, fn func(api.AuditProblem) error) error {
	return x.a.audit.Load().Problems(ctx, func(p audit.Problem) error {
		backend := ""
		if k, err := key.Parse(p.RecordedKey); err == nil {
			backend = k.Backend().String()
		}
		return fn(api.AuditProblem{Path: p.Path, State: p.Class.String(), Backend: backend, Recorded: p.Recorded,
			Observed: p.Observed, RecordedKey: p.RecordedKey, ObservedKey: p.ObservedKey, Size: p.Size, Seen: p.Seen, Why: p.Why})
	})
}

// AuditPause implements api.Auditor.
func (x *adapter) AuditPause(ctx context.Context, paused bool) error {
	if paused {
		return auditError(x.a.audit.Load().Pause(ctx))
	}
	return auditError(x.a.audit.Load().Resume(ctx))
}

// AuditAccept implements api.Auditor.
func (x *adapter) AuditAccept(ctx context.Context, path []byte) (api.AuditAcceptResult, error) {
	res, err := x.a.audit.Load().Accept(ctx, path)
	if err != nil {
		return api.AuditAcceptResult{}, auditError(err)
	}
	out := api.AuditAcceptResult{Accepted: res.Accepted}
	for i, p := range res.Failed {
		out.Failed = append(out.Failed, api.AuditAcceptFailure{Path: p, Error: res.Errs[i].Error()})
	}
	return out, nil
}

// auditSummary is the audit's part of the daemon's status: what it does
// and why, the problems, the coverage, the last pass and the next run.
func (a *App) auditSummary() *api.AuditStatus {
	au := a.audit.Load()
	if au == nil {
		return nil
	}
	s := apiAuditStatus(au.Status())
	s.Run, s.Pass, s.Totals = nil, nil, nil
	return &s
}
