package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc: 100 on every
// Linux architecture Go supports (the kernel ABI fixes it), so it needs no
// sysconf call.
const clockTicks = 100

// The process groups CPU time is attributed to.
const (
	groupRegistry = "registry"
	groupPostgres = "postgres"
	groupRabbit   = "rabbitmq"
	groupBench    = "registry-bench"
	groupOther    = "other"
)

func groupOrder() []string {
	return []string{groupRegistry, groupPostgres, groupRabbit, groupBench, groupOther}
}

// procSampler attributes CPU time to the processes a benchmark involves by
// reading /proc before and after a measured window. It needs no profiler and
// no privileges, and it shows what the registry's own numbers cannot: how
// much of the machine PostgreSQL, RabbitMQ and the load generator took, on
// a box where all of them share two cores.
type procSampler struct {
	registryPID, selfPID int
}

func newProcSampler(registryPID, selfPID int) *procSampler {
	return &procSampler{registryPID: registryPID, selfPID: selfPID}
}

type procTicks struct {
	group, comm string
	ppid        int
	ticks       uint64
}

type procSnapshot struct {
	at    time.Time
	procs map[int]procTicks
	// busy and iowait are machine-wide ticks from /proc/stat; total
	// includes idle.
	busy, iowait, total uint64
	err                 error
}

func (p *procSampler) classify(pid int, comm string) string {
	switch {
	case pid == p.registryPID && p.registryPID != 0:
		return groupRegistry
	case pid == p.selfPID:
		return groupBench
	case comm == "postgres" || strings.HasPrefix(comm, "postgres:"):
		return groupPostgres
	case strings.HasPrefix(comm, "beam") || comm == "erl_child_setup" || comm == "epmd" || comm == "inet_gethost":
		return groupRabbit
	default:
		return groupOther
	}
}

// snapshot reads every process's CPU time and the machine's. Processes that
// exit between two snapshots are lost; the ones that matter (registry,
// PostgreSQL backends of its pool, RabbitMQ) live through a scenario.
func (p *procSampler) snapshot() procSnapshot {
	s := procSnapshot{at: time.Now(), procs: map[int]procTicks{}}
	if runtime.GOOS != "linux" {
		s.err = fmt.Errorf("no /proc on %s", runtime.GOOS)
		return s
	}
	s.busy, s.iowait, s.total, s.err = machineTicks()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		s.err = fmt.Errorf("read /proc: %w", err)
		return s
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, ppid, ticks, err := processTicks(pid)
		if err != nil {
			continue // exited meanwhile
		}
		s.procs[pid] = procTicks{group: p.classify(pid, comm), comm: comm, ppid: ppid, ticks: ticks}
	}
	return s
}

// machineTicks sums the aggregate "cpu" line of /proc/stat.
func machineTicks() (busy, iowait, total uint64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, 0, 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]
	var v [8]uint64
	for i := range v {
		v[i], _ = strconv.ParseUint(fields[i+1], 10, 64)
	}
	busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return busy, v[4], busy + v[3] + v[4], nil
}

// processTicks returns the command name and the CPU time of pid from
// /proc/<pid>/stat: utime+stime (all threads) plus cutime+cstime, the time
// of children it has reaped. The children count matters for PostgreSQL:
// parallel query workers live for one query, and their time shows up only
// in the postmaster's cutime once they exit.
func processTicks(pid int) (comm string, ppid int, ticks uint64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, 0, err
	}
	// "pid (comm) state ppid ..."; comm may contain spaces and parentheses.
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return "", 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	comm = string(data[open+1 : end])
	fields := strings.Fields(string(data[end+1:]))
	// fields[0] is field 3 (state); utime, stime, cutime and cstime are
	// fields 14 to 17.
	if len(fields) < 15 {
		return "", 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return "", 0, 0, fmt.Errorf("malformed ppid in /proc/%d/stat", pid)
	}
	for _, f := range fields[11:15] {
		v, err := strconv.ParseInt(f, 10, 64) // cutime and cstime are signed
		if err != nil {
			return "", 0, 0, fmt.Errorf("malformed times in /proc/%d/stat", pid)
		}
		ticks += uint64(max(v, 0))
	}
	return comm, ppid, ticks, nil
}

// cpuUsage is where the CPU went between two snapshots, in cores (CPU
// seconds per second of wall time).
type cpuUsage struct {
	wall      time.Duration
	cores     map[string]float64
	topOther  []string // the busiest processes in "other"
	busyPct   float64  // machine-wide, of all cores
	iowaitPct float64
	ncpu      int
	err       error
}

func (p *procSampler) usage(before, after procSnapshot) cpuUsage {
	u := cpuUsage{wall: after.at.Sub(before.at), cores: map[string]float64{}, ncpu: runtime.NumCPU()}
	if u.err = cmpErr(before.err, after.err); u.err != nil {
		return u
	}
	secs := u.wall.Seconds()
	if secs <= 0 {
		return u
	}
	type other struct {
		comm  string
		cores float64
	}
	var others []other
	// A child that exits within the window lands in its parent's cutime
	// with its whole lifetime; the part it had used before the window was
	// already in the before snapshot and must not count again.
	counted := map[int]uint64{}
	for pid, b := range before.procs {
		if _, alive := after.procs[pid]; !alive {
			counted[b.ppid] += b.ticks
		}
	}
	for pid, a := range after.procs {
		b, existed := before.procs[pid]
		var d uint64
		switch {
		case !existed:
			d = a.ticks
		case b.ticks > a.ticks || b.comm != a.comm && b.group != a.group:
			continue // pid reused
		default:
			d = a.ticks - b.ticks
			d -= min(d, counted[pid])
		}
		cores := float64(d) / clockTicks / secs
		u.cores[a.group] += cores
		if a.group == groupOther && cores >= 0.02 {
			others = append(others, other{a.comm, cores})
		}
	}
	slices.SortFunc(others, func(x, y other) int {
		switch {
		case x.cores > y.cores:
			return -1
		case x.cores < y.cores:
			return 1
		}
		return 0
	})
	for _, o := range others[:min(len(others), 3)] {
		u.topOther = append(u.topOther, fmt.Sprintf("%s %.2f", o.comm, o.cores))
	}
	if total := after.total - before.total; total > 0 {
		u.busyPct = 100 * float64(after.busy-before.busy) / float64(total)
		u.iowaitPct = 100 * float64(after.iowait-before.iowait) / float64(total)
		// "other" is whatever the machine did beyond the named groups,
		// taken from /proc/stat rather than summed over processes: that
		// includes processes that came and went unseen by either snapshot,
		// and cannot count twice a child reaped by a parent it was moved to.
		named := 0.0
		for _, g := range groupOrder() {
			if g != groupOther {
				named += u.cores[g]
			}
		}
		busyCores := float64(after.busy-before.busy) / clockTicks / secs
		u.cores[groupOther] = max(0, busyCores-named)
	}
	return u
}

func cmpErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// cpuTableHeader and row render usages as one Markdown table.
func cpuTableHeader() string {
	return "| phase | wall | registry | postgres | rabbitmq | registry-bench | other | machine busy | iowait |\n" +
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
}

func (u cpuUsage) row(phase string) string {
	if u.err != nil {
		return fmt.Sprintf("| %s | %s | CPU not sampled: %v | | | | | | |\n", phase, u.wall.Round(time.Millisecond), u.err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | %.1f s ", phase, u.wall.Seconds())
	for _, g := range groupOrder() {
		fmt.Fprintf(&b, "| %.2f ", u.cores[g])
	}
	fmt.Fprintf(&b, "| %.0f %% of %d cores | %.0f %% |\n", u.busyPct, u.ncpu, u.iowaitPct)
	return b.String()
}

// cpuNote explains the table and names what "other" was.
func cpuNote(usages []cpuUsage) string {
	seen := map[string]bool{}
	var names []string
	for _, u := range usages {
		for _, o := range u.topOther {
			name := strings.Fields(o)[0]
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	note := "CPU in cores (CPU seconds per wall second, from /proc/<pid>/stat); machine busy and iowait from /proc/stat; " +
		"\"other\" is machine busy minus the named processes, so it includes processes that came and went."
	if len(names) > 0 {
		note += " Running beside it: " + strings.Join(names, ", ") + "."
	}
	return note + "\n" + disturbance(usages)
}

// memory returns VmRSS and VmHWM (peak RSS) of pid in bytes.
func memory(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		switch key {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return rss, peak, sc.Err()
}

// disturbedAbove is how much CPU other processes may take during a
// measurement before the report flags it.
const disturbedAbove = 0.15

// disturbance is a report line when other processes took a noticeable share
// of the machine during any of usages, "" otherwise.
func disturbance(usages []cpuUsage) string {
	worst := 0.0
	for _, u := range usages {
		worst = max(worst, u.cores[groupOther])
	}
	if worst <= disturbedAbove {
		return ""
	}
	return fmt.Sprintf("\n**Disturbed:** processes outside the benchmark used up to %.2f cores during a measurement; "+
		"on a 2-core machine that moves the numbers, so treat them with care or rerun when the machine is idle (--wait-quiet).\n", worst)
}
