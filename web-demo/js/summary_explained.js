// Summary, explained: the `torch.cuda.memory_summary()` table the core prints, shown line by
// line with what each line counts beside it — which statistic of PyTorch's DeviceStats it
// reads, and what the figure means for a person deciding whether memory can be given back.
// Invariant: every line of the summary appears, in order, as printed (the row's own text,
// nothing recomputed); a line is explained from its label alone, so the figures shown are
// always the allocator's. Separator lines are left out; a label this file does not know is
// shown with no explanation rather than a wrong one. The scenarios show it under their
// map; the by-hand and replay views, beside their printed summary, on demand.

const ROWS = {
  'Allocated memory': 'Bytes of blocks handed to tensors, after rounding (to multiples of 512 B, and remainders too small to split off): allocated_bytes.',
  'Active memory': 'Allocated bytes plus blocks the program freed that still wait for work on another stream (record_stream) before they can be reused: active_bytes.',
  'Requested memory': 'Bytes the tensors asked for, before rounding; Allocated − Requested is rounding waste: requested_bytes.',
  'GPU reserved memory': 'Bytes of segments obtained from the driver (cudaMalloc) and not given back: the allocated blocks plus the cache. nvidia-smi counts these for the process, beside its CUDA context: reserved_bytes.',
  'Non-releasable memory': 'Cached free bytes inside split segments, segments that still hold a block in use. empty_cache() returns only wholly free segments, so it cannot return these, and a request can use them only where one block is large enough: inactive_split_bytes.',
  Allocations: 'Blocks allocated to tensors, counted: allocation.',
  'Active allocs': 'Active blocks, counted: allocated ones and those waiting for another stream: active.',
  'GPU reserved segments': 'Segments held, counted; each was one cudaMalloc (under expandable segments or cachalot’s policy, an address range of mapped pages): segment.',
  'Non-releasable allocs': 'Free blocks inside split segments, counted: the pieces Non-releasable memory is made of: inactive_split.',
  'Oversize allocations': 'Allocations of max_split_size_mb or more (only with that key): each is served from a cached block at most 20 MiB larger, or a segment of its own, and never split: oversize_allocations.',
  'Oversize GPU segments': 'Segments of max_split_size_mb or more, counted: oversize_segments.',
};

const POOLS = {
  'from large pool': 'The same, large pool only (blocks over 1 MiB).',
  'from small pool': 'The same, small pool only (blocks of 1 MiB or less, in 2 MiB segments).',
};

/** What one line of the summary says, or '' for a line this file does not know. */
export function explainLine(line) {
  const cells = line.split('|').map((c) => c.trim()).filter(Boolean);
  const label = cells[0] || '';
  if (ROWS[label]) return ROWS[label];
  if (POOLS[label]) return POOLS[label];
  if (label === 'Metric') {
    return 'Cur Usage: now. Peak Usage: the most at any moment since the allocator started (or since reset_peak_memory_stats). '
      + 'Tot Alloc and Tot Freed: the sums of every increase and every decrease, so Cur Usage = Tot Alloc − Tot Freed.';
  }
  if (label.startsWith('CUDA OOMs')) {
    return 'CUDA OOMs: allocations refused with an out-of-memory error: num_ooms. cudaMalloc retries: requests that found no cached block '
      + 'to fit and no room for a new segment, so the allocator gave back every wholly free cached segment (a cudaFree each, which waits for the device) and tried again: num_alloc_retries.';
  }
  if (/memory summary/.test(label)) return 'The device the table describes; PyTorch titles it “PyTorch CUDA memory summary”.';
  return '';
}

/** True for a line of only |, = and - (a rule between sections). */
const isRule = (line) => /^[|=\-\s]*$/.test(line);

/** Renders `summary` (the text `memory_summary(false)` returns) into `host` as a table of
 *  lines and explanations. */
export function showExplainedSummary(host, summary) {
  host.innerHTML = '';
  const lines = summary.split('\n').filter((l) => l.trim() && !isRule(l));
  if (!lines.length) return;
  const table = document.createElement('table');
  table.className = 'summary-explained';
  const head = table.createTHead().insertRow();
  for (const text of ['memory_summary() line', 'What it counts']) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = text;
    head.append(th);
  }
  const body = table.createTBody();
  for (const line of lines) {
    const tr = body.insertRow();
    const label = line.split('|').map((c) => c.trim()).filter(Boolean)[0] || '';
    tr.dataset.label = label;
    if (label.startsWith('from ')) tr.className = 'pool';
    const code = tr.insertCell();
    code.className = 'line';
    const c = document.createElement('code');
    c.textContent = line;
    code.append(c);
    const what = tr.insertCell();
    what.className = 'what';
    what.textContent = explainLine(line);
  }
  host.append(table);
}

/** Adds after `pre` (where a view prints memory_summary() and prints it again after each
 *  change) a box, closed at first, that shows the same text line by line, explained, and
 *  follows each new printing while open. */
export function explainBeside(pre) {
  const box = document.createElement('details');
  box.className = 'summary-lines';
  const title = document.createElement('summary');
  title.textContent = 'Line by line: what each line counts';
  const host = document.createElement('div');
  host.className = 'scroll-x';
  box.append(title, host);
  pre.after(box);
  const render = () => { if (box.open) showExplainedSummary(host, pre.textContent); };
  new MutationObserver(render).observe(pre, { childList: true, characterData: true, subtree: true });
  box.addEventListener('toggle', render);
  return box;
}
