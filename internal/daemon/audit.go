package daemon

import (
	"fmt"
	"os/exec"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/ledger"
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
		OnPass:  func() { a.heal.Passed() }, // set before the audit runs
		Roots:   a.rootBytes(),
	})
	if err != nil {
		return err
	}
	a.audit, a.findings.to = au, au
	return reg.Register(au.Collector())
}

// rootBytes are the roots as the audit takes them.
func (a *App) rootBytes() [][]byte {
	out := make([][]byte, len(a.cfg.Roots))
	for i, r := range a.cfg.Roots {
		out[i] = []byte(r)
	}
	return out
}

// findingClass is the audit's class of each of the indexer's findings.
var findingClass = map[indexer.FindingKind]audit.Class{
	indexer.FoundLostWrite: audit.LostWrite,
	indexer.FoundCorrupt:   audit.Corrupt,
	indexer.FoundUntraced:  audit.Untraced,
}

// findings is the one seam between the indexer and the audit, which need
// each other: the audit asks the indexer to check the files it finds
// changed (audit.Indexer), and the indexer files each file whose bytes
// changed with no witness of a write with the audit (its OnFinding). The
// indexer is built first, given found; setupAudit then sets to, before
// anything runs that can make a finding (indexer.New starts no work, and
// the API serves only once setup is done). A finding without an audit is
// only logged, by the indexer.
type findings struct{ to *audit.Auditor }

// found files f with the audit, in its terms.
func (fs *findings) found(f indexer.Finding) {
	if fs.to != nil {
		fs.to.Found(audit.Report{Path: f.Path, From: f.From, Class: findingClass[f.Kind], Was: f.Was, Now: f.Now,
			Observed: f.Digest})
	}
}
