// Package procstat is the benchmarks' one /proc sampler: what the machine
// and each process on it spent between two moments. A Snapshot reads the
// machine's CPU time (/proc/stat), every process's CPU time (utime + stime
// of /proc/PID/stat, plus the time of the children it reaped) and, for the
// processes a report names, resident memory (VmRSS and the peak VmHWM of
// /proc/PID/status). Processes are grouped by name: the ones the caller
// tracks by pid, PostgreSQL and RabbitMQ by command name, and the rest as
// Other. Between subtracts two snapshots.
//
// The benchmarks share two cores with PostgreSQL, RabbitMQ and whatever
// else runs, so a figure of CPU per execution is only honest with the whole
// machine beside it: Usage gives both, and says how much the hypervisor
// stole.
package procstat

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Groups of processes found by command name rather than tracked by pid.
const (
	Postgres = "postgresql"
	RabbitMQ = "rabbitmq"
	// Other is every process neither tracked nor a server's.
	Other = "other"
)

// Proc is one process at one moment.
type Proc struct {
	Group string
	Comm  string
	PPID  int
	// CPU is user + system time since the process started, including the
	// children it has reaped (cutime + cstime): PostgreSQL's parallel query
	// workers live for one query, and their time shows up only in the
	// postmaster's once they exit.
	CPU time.Duration
	RSS uint64 // bytes resident now; read for tracked and server processes only
	HWM uint64 // bytes, the peak resident set so far; likewise
}

// MachineCPU is the time of all CPUs since boot, from the "cpu" line of
// /proc/stat.
type MachineCPU struct {
	// Busy is all but idle and iowait, steal included.
	Busy time.Duration
	// IOWait is idle time with I/O outstanding.
	IOWait time.Duration
	// Steal is time the hypervisor ran other guests while this machine
	// wanted to run: a virtual machine's cores are not all its own, and a
	// benchmark that does not say so overstates what its code costs.
	Steal time.Duration
	Total time.Duration
}

// Snapshot is the machine and every process at one moment.
type Snapshot struct {
	At      time.Time
	Machine MachineCPU
	Procs   map[int]Proc
	Err     error // why the machine could not be read; Procs may still hold some
}

// Sampler takes snapshots. Its zero value is not usable; call New.
type Sampler struct {
	tick time.Duration // one clock tick (1/CLK_TCK)
}

// New asks getconf for CLK_TCK (100, the kernel ABI's USER_HZ on every
// architecture Go supports, when it cannot).
func New() *Sampler {
	hz := 100.0
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			hz = v
		}
	}
	return &Sampler{tick: time.Duration(float64(time.Second) / hz)}
}

// Snapshot reads the machine and every process; tracked names pids
// (name → pid) whose group is their name. A process that exits while it is
// read is left out.
func (s *Sampler) Snapshot(tracked map[string]int) Snapshot {
	snap := Snapshot{At: time.Now(), Procs: map[int]Proc{}}
	if runtime.GOOS != "linux" {
		snap.Err = fmt.Errorf("procstat: no /proc on %s", runtime.GOOS)
		return snap
	}
	snap.Machine, snap.Err = s.machine()
	byPID := make(map[int]string, len(tracked))
	for name, pid := range tracked {
		byPID[pid] = name
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := s.read(pid)
		if !ok {
			continue
		}
		p.Group = cmp.Or(byPID[pid], serverOf(p.Comm), Other)
		if p.Group != Other {
			p.RSS, p.HWM = memory(pid)
		}
		snap.Procs[pid] = p
	}
	return snap
}

// read parses /proc/PID/stat: "pid (comm) state ppid ...", where comm may
// hold spaces and parentheses.
func (s *Sampler) read(pid int) (Proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, false
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return Proc{}, false
	}
	f := strings.Fields(string(b[end+2:]))
	// After "(comm) ": state 0, ppid 1, utime 11, stime 12, cutime 13,
	// cstime 14 (the last two signed).
	if len(f) < 15 {
		return Proc{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Proc{}, false
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Proc{}, false
		}
		ticks += max(n, 0)
	}
	return Proc{Comm: string(b[open+1 : end]), PPID: ppid, CPU: time.Duration(ticks) * s.tick}, true
}

// serverOf names the server a process belongs to by its command name.
func serverOf(comm string) string {
	switch {
	case comm == "postgres" || strings.HasPrefix(comm, "postgres:"):
		return Postgres
	case strings.HasPrefix(comm, "beam"), comm == "erl_child_setup", comm == "epmd", comm == "inet_gethost":
		return RabbitMQ
	}
	return ""
}

// memory is VmRSS and VmHWM of pid in bytes (0 when it cannot be read).
func memory(pid int) (rss, hwm uint64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseUint(f[0], 10, 64)
		switch key {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// machine reads the "cpu" line of /proc/stat.
func (s *Sampler) machine() (MachineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, fmt.Errorf("procstat: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("procstat: unexpected /proc/stat line %q", line)
	}
	// user nice system idle iowait irq softirq steal; guest and guest_nice
	// are already inside user and nice.
	var v [8]time.Duration
	for i := range v {
		n, _ := strconv.ParseUint(f[i+1], 10, 64)
		v[i] = time.Duration(n) * s.tick
	}
	m := MachineCPU{IOWait: v[4], Steal: v[7]}
	for _, d := range v {
		m.Total += d
	}
	m.Busy = m.Total - v[3] - v[4]
	return m, nil
}

// HWM is the largest peak resident set among group's processes.
func (s Snapshot) HWM(group string) uint64 {
	var m uint64
	for _, p := range s.Procs {
		if p.Group == group {
			m = max(m, p.HWM)
		}
	}
	return m
}

// RSS is the summed resident set of group's processes (shared pages
// counted once per process).
func (s Snapshot) RSS(group string) uint64 {
	var sum uint64
	for _, p := range s.Procs {
		if p.Group == group {
			sum += p.RSS
		}
	}
	return sum
}

// Usage is what was spent between two snapshots.
type Usage struct {
	Wall  time.Duration
	Cores int
	// CPU is each group's CPU time. Other is not the sum of its processes
	// but the machine's busy time minus every named group's, so that it
	// holds the processes that came and went between the snapshots.
	CPU map[string]time.Duration
	// Busy, IOWait and Steal are the machine's, in CPU time (2 × Wall is a
	// fully busy two-core machine).
	Busy, IOWait, Steal time.Duration
	// TopOther names the three busiest processes of Other ("comm 0.12
	// cores"), to say what ran beside the benchmark.
	TopOther []string
	Err      error
}

// Between subtracts from from to: per pid, its later CPU time minus its
// earlier one (all of it for a pid that started in between; none for one
// that ended, whose time its parent's reaped-children count carries).
func Between(from, to Snapshot) Usage {
	u := Usage{Wall: to.At.Sub(from.At), Cores: runtime.NumCPU(), CPU: map[string]time.Duration{}, Err: cmp.Or(from.Err, to.Err)}
	if u.Err == nil {
		u.Busy = to.Machine.Busy - from.Machine.Busy
		u.IOWait = to.Machine.IOWait - from.Machine.IOWait
		u.Steal = to.Machine.Steal - from.Machine.Steal
	}
	// A child that exits within the window lands in its parent's reaped
	// time with its whole lifetime; the part it had used before the window
	// is in from already and must not count twice.
	reaped := map[int]time.Duration{}
	for pid, p := range from.Procs {
		if _, alive := to.Procs[pid]; !alive {
			reaped[p.PPID] += p.CPU
		}
	}
	type use struct {
		comm string
		cpu  time.Duration
	}
	var others []use
	var named time.Duration
	for pid, a := range to.Procs {
		d := a.CPU
		if b, existed := from.Procs[pid]; existed {
			if b.CPU > a.CPU || b.Comm != a.Comm && b.Group != a.Group {
				continue // the pid was reused
			}
			d = a.CPU - b.CPU
			d -= min(d, reaped[pid])
		}
		if a.Group == Other {
			others = append(others, use{a.Comm, d})
			continue
		}
		u.CPU[a.Group] += d
		named += d
	}
	u.CPU[Other] = max(0, u.Busy-named)
	slices.SortFunc(others, func(x, y use) int { return cmp.Compare(y.cpu, x.cpu) })
	for _, o := range others[:min(len(others), 3)] {
		if c := u.Of(o.cpu); c >= 0.02 {
			u.TopOther = append(u.TopOther, fmt.Sprintf("%s %.2f cores", o.comm, c))
		}
	}
	return u
}

// Of is d in cores: CPU seconds per second of the window.
func (u Usage) Of(d time.Duration) float64 {
	if u.Wall <= 0 {
		return 0
	}
	return d.Seconds() / u.Wall.Seconds()
}

// Named is the CPU time of every group but Other.
func (u Usage) Named() time.Duration {
	var sum time.Duration
	for g, d := range u.CPU {
		if g != Other {
			sum += d
		}
	}
	return sum
}

// LoadAverage is the 1-, 5- and 15-minute load average, as /proc/loadavg
// writes it.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Proc reads one process now, its memory included; false when it is gone.
func (s *Sampler) Proc(pid int) (Proc, bool) {
	p, ok := s.read(pid)
	if ok {
		p.RSS, p.HWM = memory(pid)
	}
	return p, ok
}

// Parent is pid's parent process id; false when pid is gone.
func Parent(pid int) (int, bool) {
	p, ok := (&Sampler{}).read(pid)
	return p.PPID, ok
}
