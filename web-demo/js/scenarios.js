// Guided scenarios: each teaches one claim of the three source articles (../shared/seeds/,
// in Chinese), as a short script on the real allocator (`policy:pytorch`, PyTorch's own
// decisions) followed, wherever a real trace can show it, by the same effect on a real
// training run. Where a claim does not hold on the real traces, the scenario says so.
// A step returns its output line; `{ text, expected: 'oom' }` marks an out-of-memory error
// the script means to provoke. A claim is one quotation, or a list of them where it draws
// on two articles, each quoted apart with its own source. Every figure quoted is computed
// live, never written in.
// Invariant: scripts use only ScenarioContext, so they run in the page and under Node.

import { GiB, MiB } from './scenario_context.js';
import { bytes, count } from './units.js';
import { comparableReference, referenceRatio } from './reference.js';
import { DRIVER_COSTS, callTime, costRange, msRange } from './driver_costs.js';

const PT = 'policy:pytorch';
const CACHALOT = 'policy:cachalot';
const GPT2 = 'gpt2_train.csv.gz';
const FC_CONV = 'mixed_fc_conv.csv.gz';
/** A device where mixed_fc_conv's peak requested memory (1.34 GiB) fits but PyTorch's default
 *  runs out of memory: `cachalot replay mixed_fc_conv --capacity 1.4GiB --config policy:pytorch`. */
export const PRESSURE = Math.floor(1.4 * GiB);

function oom(message) {
  if (!message) throw new Error('expected an out-of-memory error, but the allocation succeeded');
  return { text: message, expected: 'oom' };
}

/** PyTorch's own peak reserved and ratio for the same replay, where they are comparable. */
function versus(f) {
  const ref = comparableReference(f);
  return ref ? ` (PyTorch 2.11 on an H200: ${bytes(ref.peak_reserved)}, ${referenceRatio(ref).toFixed(3)}×)` : '';
}

/** The share of the device's memory not reserved, as "71% of the 1.00 GiB device". */
function freeShare(ctx) {
  const capacity = ctx.alloc.capacity;
  return `${Math.round(100 * (1 - ctx.fig().reserved / capacity))}% of the ${bytes(capacity)} device`;
}

/** One line per replayed figure set: "peak reserved X = r× peak requested". */
function peakLine(f) {
  return `peak reserved ${bytes(f.peak_reserved_bytes)} = ${f.reserved_over_requested.toFixed(3)}× peak requested ${bytes(f.peak_requested_bytes)}`;
}

/** "all of it" when `part` is the whole, else "X of it". */
function ofIt(part, whole) {
  return part === whole ? 'all of it' : `${bytes(part)} of it`;
}

/** "Allocated X, GPU reserved Y, Non-releasable Z": three rows of memory_summary(), now. */
function summaryLine(ctx) {
  const s = ctx.stats();
  return `Allocated ${bytes(s.allocated_bytes.all.current)}, GPU reserved ${bytes(s.reserved_bytes.all.current)}, Non-releasable ${bytes(s.inactive_split_bytes.all.current)}`;
}

/** A leaky training loop: each epoch a new prefetcher (a new stream) loads a 30 MiB batch, the model's
 *  200 MiB of activations come and go on stream 0, and (when `leak`) the prefetcher keeps a 2 MiB tensor. */
function epochs(ctx, from, to, leak) {
  const lines = [];
  for (let e = from; e <= to; e++) {
    const err = ctx.tryMalloc(`batch${e}`, 30 * MiB, e) || ctx.tryMalloc(`act${e}`, 200 * MiB, 0);
    if (err) {
      lines.push(`epoch ${e}: ${err}`);
      return { text: lines.join('\n'), expected: 'oom' };
    }
    ctx.free(`act${e}`);
    ctx.free(`batch${e}`);
    if (leak) ctx.malloc(`leak${e}`, 2 * MiB, e);
    lines.push(`epoch ${e}: ${ctx.line()}`);
  }
  return lines.join('\n');
}

export const SCENARIOS = [
  {
    id: 'caching',
    title: 'Caching: why reserved exceeds allocated',
    claim: {
      zh: '你可能会发现，memory_reserved比memory_allocated大得多……当你释放张量时，它并不把显存还给CUDA，而是留在自己的池子里，等下次再用。',
      en: 'memory_reserved can be much larger than memory_allocated: a freed tensor’s memory is not returned to CUDA but kept in the pool for next time.',
      source: '“PyTorch显存分配器探秘”, §2.1',
    },
    text: 'The allocator asks the device for whole segments and carves tensors out of them. Freeing a tensor returns its block to the allocator’s cache, not to the device, so reserved memory (segments held) stays above allocated memory (blocks in use), and the next request of a fitting size is served without a device call. (The article’s torch.randn(1000, 1000) is 4,000,000 bytes of float32: 4 MB, not the 40 MB another article says.)',
    steps: [
      { caption: 'a = torch.randn(1000, 1000, device="cuda")  # 4,000,000 bytes', run: (ctx) => { ctx.fresh(PT, GiB); ctx.malloc('a', 4000000); return ctx.line(); } },
      { caption: 'del a', run: (ctx) => { ctx.free('a'); return `${ctx.line()}: the block is cached, the 20 MiB segment stays reserved`; } },
      { caption: 'b = torch.randn(1000, 1000, device="cuda")', run: (ctx) => { ctx.malloc('b', 4000000); return `${ctx.line()}: served from the cache, no new device allocation`; } },
      {
        caption: 'A real run: replay gpt2_train (69,203 operations) to its end',
        run: async (ctx) => {
          await ctx.replayTo(GPT2, PT);
          const f = ctx.fig();
          return `${ctx.line()}\npeak allocated ${bytes(f.peakAllocated)}, peak reserved ${bytes(f.peakReserved)}`;
        },
      },
    ],
    conclude: (ctx) => {
      const f = ctx.fig();
      return `At the end of GPT-2’s training trace only ${bytes(f.allocated)} is allocated, yet ${bytes(f.reserved)} stays reserved: `
        + `${bytes(f.reserved - f.allocated)} of cached blocks that nvidia-smi counts as used. The claim holds.`;
    },
  },
  {
    id: 'splitting',
    title: 'Splitting: one 2 MiB and one 20 MiB segment serve many tensors',
    claim: [
      {
        zh: '在缓存中查找合适大小的空闲block；如果失败尝试分割更大的block；仍不满足则向系统请求新内存。',
        en: 'Look for a cached free block of a fitting size; failing that, split a larger block; failing that, ask the system for new memory.',
        source: '“GPU显存不够用？PyTorch内存管理全解析”, §1.1',
      },
      {
        zh: '每个段默认2MB，大张量会申请大段。',
        en: 'Segments are 2 MB by default; large tensors get large segments.',
        source: '“PyTorch显存分配器探秘”, §2.3 (the table of memory_summary() fields)',
      },
    ],
    text: 'Requests of at most 1 MiB come from the small pool, whose segments are 2 MiB; larger ones from the large pool, whose segments are 20 MiB for requests under 10 MiB and the request’s own size (rounded to 2 MiB) above that. A block is split when the remainder is worth keeping (at least 512 B in the small pool, more than 1 MiB in the large one); a freed block merges with free neighbours. Watch the map: the step list shows each call, the decision list each step of its reasoning.',
    steps: [
      { caption: 'malloc 1000 B', run: (ctx) => { ctx.fresh(PT, GiB); ctx.malloc('s1', 1000); return ctx.line(); } },
      { caption: 'malloc 300 KiB', run: (ctx) => { ctx.malloc('s2', 300 * 1024); return `${ctx.line()}: split from the same 2 MiB segment`; } },
      { caption: 'malloc 5 MiB', run: (ctx) => { ctx.malloc('l1', 5 * MiB); return `${ctx.line()}: a 20 MiB segment, 15 MiB left cached`; } },
      { caption: 'malloc 6 MiB', run: (ctx) => { ctx.malloc('l2', 6 * MiB); return `${ctx.line()}: split from the 15 MiB remainder`; } },
      { caption: 'malloc 8.5 MiB', run: (ctx) => { ctx.malloc('l3', 8.5 * MiB); return `${ctx.line()}: the 9 MiB remainder is handed out whole (0.5 MiB is not worth a block): rounding waste, dotted in the map`; } },
      { caption: 'malloc 30 MiB', run: (ctx) => { ctx.malloc('l4', 30 * MiB); return `${ctx.line()}: a request of 10 MiB or more gets a segment of its own size`; } },
      { caption: 'free the 5 MiB and the 6 MiB tensors', run: (ctx) => { ctx.free('l1'); ctx.free('l2'); return `${ctx.line()}: the two blocks merged into one 11 MiB cached block`; } },
      {
        caption: 'A real run: how many segments serve gpt2_train?',
        run: async (ctx) => {
          const f = await ctx.replay(GPT2, PT);
          const t = await ctx.loadTrace(GPT2);
          await ctx.replayTo(GPT2, PT);
          ctx.allocs = JSON.parse(t.report_json()).allocs;
          return `${t.describe()}; the device was asked for memory only ${count(f.device_allocs)} times`;
        },
      },
    ],
    conclude: (ctx) => `Every request went through the same path: best fit in the cache, split if worth it, a new segment only when nothing fits. On GPT-2’s trace, ${count(ctx.fig().deviceAllocs)} segments served ${count(ctx.allocs)} allocations. The article’s “2 MB per segment” holds for the small pool only; large tensors get 20 MiB or their own size.`,
  },
  {
    id: 'fragmentation',
    title: 'Fragmentation: out of memory with enough free memory',
    claim: [
      {
        zh: '即使总空闲显存足够，缺乏连续空间仍会导致分配失败。这就是为什么有时显存明明有剩余却仍报错的原因。',
        en: 'Even when the total free memory is enough, the lack of a contiguous space makes an allocation fail: that is why you sometimes get an error while memory is clearly left.',
        source: '“GPU显存不够用？PyTorch内存管理全解析”, §1.2',
      },
      {
        zh: '例如，交替训练全连接层（大矩阵）和卷积层（小特征图）时易出现此问题。',
        en: 'For example, it easily happens when training alternates fully connected layers (large matrices) and convolution layers (small feature maps).',
        source: '“PyTorch显存管理机制解析”, §二.1',
      },
    ],
    text: 'A block can only serve a request it is large enough for, and free blocks merge only with free neighbours in the same segment. Free every other tensor and the cache holds many holes, none large enough; if the device is full and every segment still holds a live tensor, nothing can be returned to make room. Virtual memory lifts the limit: cachalot’s own policy maps 2 MiB physical pages into one address range, so the pages under the holes can be moved to wherever a request needs contiguous addresses. The article’s own example, fully connected layers between convolutions, is the mixed_fc_conv trace: replayed on a device just larger than its peak requested memory, PyTorch’s default runs out of memory. The last two steps replay the script and GPT-2’s trace under cachalot’s policy.',
    steps: [
      { caption: 'On a 100 MiB device, allocate twenty 5 MiB tensors', run: (ctx) => { ctx.fresh(PT, 100 * MiB); for (let i = 1; i <= 20; i++) ctx.malloc(`t${i}`, 5 * MiB); return ctx.line(); } },
      { caption: 'Free every other tensor', run: (ctx) => { for (let i = 1; i <= 20; i += 2) ctx.free(`t${i}`); return `${ctx.line()}: 50 MiB free, in ten 5 MiB holes`; } },
      { caption: 'Ask for 8 MiB', run: (ctx) => oom(ctx.tryMalloc('big', 8 * MiB)) },
      {
        caption: 'A real run: gpt2_train on a 15 GiB device',
        run: async (ctx) => {
          const f = await ctx.replay(GPT2, PT, 15 * GiB);
          const full = await ctx.replay(GPT2, PT);
          if (!f.first_oom) throw new Error('expected gpt2_train to run out of memory on 15 GiB');
          await ctx.replayTo(GPT2, PT, 15 * GiB, f.first_oom_op + 1);
          ctx.real = full;
          return { text: `its peak requested memory is ${bytes(full.peak_requested_bytes)}, less than 15 GiB, and yet: ${f.first_oom}`, expected: 'oom' };
        },
      },
      {
        caption: 'The article’s case: mixed_fc_conv (fully connected layers between convolutions) on a 1.40 GiB device',
        run: async (ctx) => {
          const full = await ctx.replay(FC_CONV, PT);
          const f = await ctx.replay(FC_CONV, PT, PRESSURE);
          if (!f.first_oom) throw new Error('expected mixed_fc_conv to run out of memory on 1.40 GiB');
          await ctx.replayTo(FC_CONV, PT, PRESSURE, f.first_oom_op + 1);
          const s = ctx.stats();
          ctx.fcConv = { full, f, cached: s.reserved_bytes.all.current - s.allocated_bytes.all.current, pinned: s.inactive_split_bytes.all.current };
          return {
            text: `its peak requested memory is ${bytes(full.peak_requested_bytes)}, less than ${bytes(PRESSURE)}, and yet ${count(f.ooms)} allocations fail. The first: ${f.first_oom}`,
            expected: 'oom',
          };
        },
      },
      {
        caption: 'The same script under cachalot’s policy (policy:cachalot): pages move under the request',
        run: (ctx) => {
          ctx.fresh(CACHALOT, 100 * MiB);
          for (let i = 1; i <= 20; i++) ctx.malloc(`t${i}`, 5 * MiB);
          for (let i = 1; i <= 20; i += 2) ctx.free(`t${i}`);
          ctx.malloc('big', 8 * MiB);
          const moved = ctx.calls.at(-1).decisions.filter((d) => d.kind === 'moved_pages');
          ctx.moved = moved.reduce((n, d) => n + d.pages, 0);
          if (ctx.moved === 0) throw new Error('expected the 8 MiB request to move idle pages');
          return `the 8 MiB request succeeds: ${ctx.moved} idle 2 MiB pages under the holes were moved under it (${ctx.line()})`;
        },
      },
      {
        caption: 'gpt2_train on the 15 GiB device, and mixed_fc_conv on the 1.40 GiB one, under cachalot’s policy',
        run: async (ctx) => {
          const f = await ctx.replay(GPT2, CACHALOT, 15 * GiB);
          if (f.first_oom) throw new Error(`expected gpt2_train to fit in 15 GiB under cachalot's policy: ${f.first_oom}`);
          ctx.paged = f;
          ctx.pagedFcConv = await ctx.replay(FC_CONV, CACHALOT, PRESSURE);
          await ctx.replayTo(GPT2, CACHALOT, 15 * GiB);
          return `gpt2_train, no out of memory: ${peakLine(f)}\nmixed_fc_conv: ${count(ctx.pagedFcConv.ooms)} out of memory, ${peakLine(ctx.pagedFcConv)}`;
        },
      },
    ],
    conclude: (ctx) => `Out of memory while memory is free: in the small script 50 MiB is cached in 5 MiB pieces and an 8 MiB request fails; on GPT-2’s trace a request fails on a 15 GiB device although the trace never needs more than ${bytes(ctx.real.peak_requested_bytes)} at once. On the article’s own case, mixed_fc_conv, PyTorch’s default refuses ${count(ctx.fcConv.f.ooms)} allocations on a ${bytes(PRESSURE)} device though the run never asks for more than ${bytes(ctx.fcConv.full.peak_requested_bytes)} at once: at the first, ${bytes(ctx.fcConv.cached)} is cached and ${ofIt(ctx.fcConv.pinned, ctx.fcConv.cached)} lies in segments that still hold a tensor (non-releasable memory), in pieces too small for the request. The claim holds for PyTorch’s segments. With physical pages mapped into virtual addresses it does not: cachalot’s policy served the 8 MiB request by moving ${ctx.moved} idle pages, and ran GPT-2’s trace in 15 GiB with a peak of ${ctx.paged.reserved_over_requested.toFixed(3)}× the memory it requested${ctx.pagedFcConv.ooms ? '' : `, and mixed_fc_conv in ${bytes(PRESSURE)} with no out of memory`}.`,
  },
  {
    id: 'max-split',
    title: 'max_split_size_mb: where it helps, and where it backfires',
    claim: {
      zh: "os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'max_split_size_mb:128' ……这样分配器就不会把大块显存切得太碎，减少了碎片化。",
      en: 'Setting max_split_size_mb:128 stops the allocator from cutting large blocks into small pieces, reducing fragmentation.',
      source: '“PyTorch显存分配器探秘”, §2.5 (and max_split_size_mb:32 in “GPU显存不够用？”, §1.2)',
    },
    text: 'With max_split_size_mb, a request below the limit never takes (and so never splits) a cached block at or above it: it is served from a smaller cached block if one fits, or else from a new segment sized by the usual rules (a 20 MiB segment for a request under 10 MiB, which later requests may share). That keeps big blocks whole for big requests — and costs memory whenever the big cached blocks could have served the small ones. The small script shows the first effect; the real traces on a 140 GiB device, where memory never runs short, show the second. Under pressure the first wins: on a device barely larger than what mixed_fc_conv asks for at once, the value “GPU显存不够用？” suggests, max_split_size_mb:32, removes every out of memory — and pays for it in driver calls, since a run short of memory frees cached segments and asks again.',
    steps: [
      {
        caption: 'PyTorch default, 300 MiB device: cache a 200 MiB block, take 50 MiB, then ask for 200 MiB',
        run: (ctx) => {
          ctx.fresh(PT, 300 * MiB);
          ctx.malloc('A', 200 * MiB);
          ctx.free('A');
          ctx.malloc('B', 50 * MiB);
          return oom(ctx.tryMalloc('C', 200 * MiB));
        },
      },
      {
        caption: 'The same with max_split_size_mb:128',
        run: (ctx) => {
          ctx.fresh(`${PT},max_split_size_mb:128`, 300 * MiB);
          ctx.malloc('A', 200 * MiB);
          ctx.free('A');
          ctx.malloc('B', 50 * MiB);
          ctx.malloc('C', 200 * MiB);
          return `${ctx.line()}: B could not take the cached 200 MiB block and got a new segment of the usual size for its request, so C found the 200 MiB block whole`;
        },
      },
      {
        caption: 'A real run: gpt2_train under both configs',
        run: async (ctx) => {
          const a = await ctx.replay(GPT2, PT);
          const b = await ctx.replay(GPT2, `${PT},max_split_size_mb:128`);
          await ctx.replayTo(GPT2, `${PT},max_split_size_mb:128`);
          ctx.gpt2 = [a, b];
          return `default: ${peakLine(a)}${versus(a)}\nmax_split_size_mb:128: ${peakLine(b)}${versus(b)}`;
        },
      },
      {
        caption: 'And resnet50_train and mixed_fc_conv',
        run: async (ctx) => {
          const out = [];
          for (const t of ['resnet50_train.csv.gz', 'mixed_fc_conv.csv.gz']) {
            const a = await ctx.replay(t, PT);
            const b = await ctx.replay(t, `${PT},max_split_size_mb:128`);
            out.push(`${t.replace('.csv.gz', '')}: ${bytes(a.peak_reserved_bytes)} → ${bytes(b.peak_reserved_bytes)} (${a.reserved_over_requested.toFixed(3)}× → ${b.reserved_over_requested.toFixed(3)}×)`);
          }
          return out.join('\n');
        },
      },
      {
        caption: 'Under pressure: mixed_fc_conv on a 1.40 GiB device, PyTorch’s default and max_split_size_mb:128',
        run: async (ctx) => {
          const a = await ctx.replay(FC_CONV, PT, PRESSURE);
          const b = await ctx.replay(FC_CONV, `${PT},max_split_size_mb:128`, PRESSURE);
          if (!a.first_oom) throw new Error('expected mixed_fc_conv to run out of memory on 1.40 GiB');
          await ctx.replayTo(FC_CONV, PT, PRESSURE, a.first_oom_op + 1);
          ctx.pressure = { a, b };
          return {
            text: `default: ${count(a.ooms)} allocations refused; max_split_size_mb:128: ${count(b.ooms)}. The first: ${a.first_oom}`,
            expected: 'oom',
          };
        },
      },
      {
        caption: 'The same device with max_split_size_mb:32',
        run: async (ctx) => {
          const conf = `${PT},max_split_size_mb:32`;
          const c = await ctx.replay(FC_CONV, conf, PRESSURE);
          if (c.first_oom) throw new Error(`expected max_split_size_mb:32 to run mixed_fc_conv in 1.40 GiB: ${c.first_oom}`);
          await ctx.replayTo(FC_CONV, conf, PRESSURE);
          ctx.pressure.c = c;
          const { a } = ctx.pressure;
          return `${count(c.ooms)} allocations refused: ${peakLine(c)}\n`
            + `the price: ${count(c.device_allocs)} segments allocated and ${count(c.device_frees)} freed, against the default’s ${count(a.device_allocs)} and ${count(a.device_frees)}`;
        },
      },
    ],
    conclude: (ctx) => {
      const [a, b] = ctx.gpt2;
      const ratio = (b.peak_reserved_bytes / a.peak_reserved_bytes).toFixed(2);
      const ra = comparableReference(a);
      const rb = comparableReference(b);
      const theirs = ra && rb ? ` (PyTorch measured ${(rb.peak_reserved / ra.peak_reserved).toFixed(2)}× on an H200)` : '';
      const { a: pa, b: pb, c: pc } = ctx.pressure;
      return `It helps in the made-up case. On the real runs with memory to spare it backfires: GPT-2’s peak reserved memory grows ${ratio}×${theirs}, ResNet-50’s grows too, and the mixed run does not change. `
        + `Under pressure it helps: on a ${bytes(PRESSURE)} device mixed_fc_conv loses ${count(pa.ooms)} allocations under PyTorch’s default (${count(pb.ooms)} with max_split_size_mb:128) and ${count(pc.ooms)} with max_split_size_mb:32, `
        + `at the price of ${count(pc.device_allocs + pc.device_frees)} segment allocations and frees instead of ${count(pa.device_allocs + pa.device_frees)}. Measure before setting it, on the device you will run on.`;
    },
  },
  {
    id: 'empty-cache',
    title: 'empty_cache(): returns cached memory, at a price',
    claim: {
      zh: '使用torch.cuda.empty_cache()强制清理缓存池，但会带来性能开销。',
      en: 'torch.cuda.empty_cache() forcibly clears the cache pool, but costs performance.',
      source: '“PyTorch显存管理机制解析”, §二.1; “GPU显存不够用？”, §2.2 (call it between epochs, not every batch)',
    },
    text: 'empty_cache returns every cached segment that holds no live block. A segment with even one live tensor stays, with all its free space: empty_cache cannot fix fragmentation. And what it returned must be asked for again: the next request that needs it is a driver call instead of a cache hit (well under a microsecond). The real-run steps count those calls in two epochs (passes) of GPT-2’s trace, with and without empty_cache() between them, and put a time on them from the driver’s costs on an H200.',
    steps: [
      {
        caption: 'Allocate a 100 MiB tensor and two 5 MiB tensors; free the 100 MiB one and one 5 MiB one',
        run: (ctx) => {
          ctx.fresh(PT, GiB);
          ctx.malloc('a', 100 * MiB);
          ctx.malloc('b', 5 * MiB);
          ctx.malloc('c', 5 * MiB);
          ctx.free('a');
          ctx.free('b');
          return ctx.line();
        },
      },
      { caption: 'torch.cuda.empty_cache()', run: (ctx) => { ctx.emptyCache(); return `${ctx.line()}: the 100 MiB segment went back; the 20 MiB one stays, c lives in it`; } },
      { caption: 'Allocate 100 MiB again', run: (ctx) => { const before = ctx.fig().deviceAllocs; ctx.malloc('a2', 100 * MiB); return `${ctx.line()}: ${ctx.fig().deviceAllocs - before} new device allocation (a cache hit before empty_cache)`; } },
      {
        caption: 'A real run: two epochs of gpt2_train, keeping the cache or calling empty_cache() between them',
        run: async (ctx) => {
          const e = await ctx.epochCalls(GPT2, PT);
          ctx.epochs = e;
          return `first epoch (cold): ${count(e.cold.allocations)} cuMemAlloc calls\n`
            + `second epoch, cache kept: ${count(e.warm.allocations)} cuMemAlloc, ${count(e.warm.frees)} cuMemFree\n`
            + `empty_cache() between them: ${count(e.emptied.frees)} cuMemFree (${bytes(e.emptied_segment_bytes.reduce((n, b) => n + b, 0))} back to the device), `
            + `then the second epoch makes ${count(e.after_empty.allocations)} cuMemAlloc calls again`;
        },
      },
      {
        caption: 'What those calls take on an H200',
        run: (ctx) => {
          const e = ctx.epochs;
          const frees = callTime('free', e.emptied_segment_bytes);
          const allocs = callTime('alloc', e.after_empty_segment_bytes);
          ctx.epochTime = { least: frees.least + allocs.least, most: frees.most + allocs.most };
          return `${costRange('alloc')}; ${costRange('free')}, ${DRIVER_COSTS.source}.\n`
            + `${count(e.emptied.frees)} cuMemFree: ${msRange(frees)}; ${count(e.after_empty.allocations)} cuMemAlloc: ${msRange(allocs)}; `
            + `an epoch with the cache kept: ${count(e.warm.allocations + e.warm.frees)} driver calls`;
        },
      },
      {
        caption: 'A real run: gpt2_train to its end, then empty_cache()',
        run: async (ctx) => {
          await ctx.replayTo(GPT2, PT);
          const before = ctx.line();
          ctx.emptyCache();
          return `before: ${before}\nafter:  ${ctx.line()}`;
        },
      },
    ],
    conclude: (ctx) => `empty_cache brought GPT-2’s reserved memory down to ${bytes(ctx.fig().reserved)}, but segments that still hold a live tensor stayed, and every segment returned costs a driver call when it is needed again: `
      + `between two epochs of GPT-2’s trace, ${count(ctx.epochs.emptied.frees)} cuMemFree and ${count(ctx.epochs.after_empty.allocations)} cuMemAlloc calls, ${msRange(ctx.epochTime)} on an H200, where keeping the cache made ${count(ctx.epochs.warm.allocations + ctx.epochs.warm.frees)}. `
      + 'The claim holds: use it between phases, not every batch.',
  },
  {
    id: 'summary',
    title: 'memory_summary(), line by line: the cache you cannot give back',
    claim: {
      zh: 'Reserved：分配器预留的缓存，如果这个值远大于Allocated，说明缓存浪费严重。Free：设备上剩余的空闲显存，注意，这个值可能为0，但实际还有缓存可释放。',
      en: 'Reserved: the cache the allocator keeps; if it is much larger than Allocated, the cache wastes a lot. Free: the memory left on the device; it may be 0 while cache could still be released.',
      source: '“PyTorch显存分配器探秘”, §2.3 (two rows of its table of memory_summary() fields)',
    },
    text: 'torch.cuda.memory_summary() prints one row per statistic, for all memory and then each pool, in four columns: now, the peak, and the totals ever added and taken away. The panel under the map explains every line of the summary beside it. The article reads Reserved − Allocated as cache that could be released; the summary’s Non-releasable memory says how much of it cannot: the free blocks of segments that still hold a tensor. empty_cache() returns a segment only whole, so it leaves them, and a request can use one only if it fits.',
    steps: [
      {
        caption: 'a = 5 MiB, b = 5 MiB, then del a',
        run: (ctx) => {
          ctx.fresh(PT, GiB);
          ctx.malloc('a', 5 * MiB);
          ctx.malloc('b', 5 * MiB);
          ctx.free('a');
          return `${summaryLine(ctx)}: a’s block and the rest of the segment are free, in a segment b still holds`;
        },
      },
      { caption: 'torch.cuda.empty_cache()', run: (ctx) => { ctx.emptyCache(); return `${summaryLine(ctx)}: nothing went back; non-releasable memory is what empty_cache() cannot return`; } },
      { caption: 'del b; torch.cuda.empty_cache()', run: (ctx) => { ctx.free('b'); ctx.emptyCache(); return `${summaryLine(ctx)}: the segment was whole again, so it went back`; } },
      {
        caption: 'A real run: mixed_fc_conv on a 1.40 GiB device, up to its first out of memory',
        run: async (ctx) => {
          const f = await ctx.replay(FC_CONV, PT, PRESSURE);
          if (!f.first_oom) throw new Error('expected mixed_fc_conv to run out of memory on 1.40 GiB');
          await ctx.replayTo(FC_CONV, PT, PRESSURE, f.first_oom_op + 1);
          const s = ctx.stats();
          ctx.atOom = { op: f.first_oom_op, cached: s.reserved_bytes.all.current - s.allocated_bytes.all.current, pinned: s.inactive_split_bytes.all.current };
          return `after operation ${count(f.first_oom_op)}: ${summaryLine(ctx)}, CUDA OOMs ${count(s.num_ooms)}, cudaMalloc retries ${count(s.num_alloc_retries)}: `
            + `${ctx.atOom.pinned === ctx.atOom.cached ? 'all' : bytes(ctx.atOom.pinned)} of the ${bytes(ctx.atOom.cached)} cache is non-releasable`;
        },
      },
      {
        caption: 'The same run to its end',
        run: async (ctx) => {
          await ctx.replayTo(FC_CONV, PT, PRESSURE);
          const s = ctx.stats();
          ctx.atEnd = s;
          return `${summaryLine(ctx)}, CUDA OOMs ${count(s.num_ooms)}, cudaMalloc retries ${count(s.num_alloc_retries)}; the peak of non-releasable memory: ${bytes(s.inactive_split_bytes.all.peak)}`;
        },
      },
    ],
    conclude: (ctx) => `Reserved − Allocated is the cache, but not all of it can be released: at mixed_fc_conv’s first out of memory on ${bytes(PRESSURE)}, ${bytes(ctx.atOom.cached)} was cached and ${ofIt(ctx.atOom.pinned, ctx.atOom.cached)} was non-releasable, in segments that still held tensors, and none of its blocks fitted the request. `
      + `So the article’s rule needs its second half: when Reserved ≫ Allocated, read Non-releasable memory; if it is most of the gap, empty_cache() will not help, and the cache is fragmented (the fragmentation and max_split_size_mb scenarios show what does).`,
  },
  {
    id: 'leak',
    title: 'Reserved grows across epochs: a small leak',
    claim: {
      zh: 'Allocated几乎没变，但Reserved一直在涨……最终Free变成0，新请求触发OOM。……每个epoch都会创建新的DataLoader实例，里面有一些临时张量没有被正确释放。',
      en: 'Allocated barely changed but reserved kept growing, until free memory reached 0 and a request ran out of memory. Each epoch created a new DataLoader whose temporary tensors were never released.',
      source: '“PyTorch显存分配器探秘”, §2.4',
    },
    text: 'A training loop on a 512 MiB device. Each epoch a new prefetcher, with a CUDA stream of its own, loads a 30 MiB batch; the model’s 200 MiB of activations come and go on stream 0. The prefetcher keeps a 2 MiB tensor it never frees. Blocks are cached per stream, so each epoch’s batch segment is useless to later epochs; without the leak the allocator returns those idle segments when memory runs short. With it, each idle segment holds one live 2 MiB tensor and can never be returned.',
    steps: [
      { caption: 'Epochs 1–4, leaking 2 MiB each', run: (ctx) => { ctx.fresh(PT, 512 * MiB); return epochs(ctx, 1, 4, true); } },
      { caption: 'Epochs 5–8', run: (ctx) => epochs(ctx, 5, 8, true) },
      { caption: 'Epochs 9–12', run: (ctx) => { const r = epochs(ctx, 9, 12, true); ctx.leaked = ctx.fig(); return r; } },
      {
        caption: 'The same 12 epochs without the leak',
        run: (ctx) => { ctx.fresh(PT, 512 * MiB); const r = epochs(ctx, 1, 12, false); return typeof r === 'string' ? r.split('\n').slice(-3).join('\n') : r; },
      },
    ],
    conclude: (ctx) => {
      const f = ctx.leaked;
      return `With the leak, allocated grew 2 MiB an epoch while reserved grew 30 MiB an epoch, until an epoch ran out of memory with ${bytes(f.reserved - f.allocated)} cached in pieces too small or on the wrong stream. Without it, the same loop runs on: the allocator returns idle segments when it needs room (each a device call). No real trace shows this: the three recorded runs do not leak.`;
    },
  },
  {
    id: 'fraction',
    title: 'A memory-fraction limit and its out-of-memory message',
    claim: {
      zh: '下一章我会讲如何用torch.cuda.set_per_process_memory_fraction限制显存使用上限，这个在生产环境中特别有用。',
      en: 'torch.cuda.set_per_process_memory_fraction caps how much memory a process may use — especially useful in production.',
      source: '“PyTorch显存分配器探秘”, §2.6',
    },
    text: 'A memory fraction caps reserved memory at a share of the device. A request that would need a new segment past the cap fails even though the device has room, and the error message says so: it names the allowed amount beside the device’s free memory.',
    steps: [
      { caption: '1 GiB device; set_per_process_memory_fraction(0.5)', run: (ctx) => { ctx.fresh(PT, GiB); ctx.setFraction(0.5); return `at most ${bytes(GiB / 2)} may be reserved`; } },
      { caption: 'x = 300 MiB', run: (ctx) => { ctx.malloc('x', 300 * MiB); return ctx.line(); } },
      { caption: 'y = 300 MiB', run: (ctx) => { const r = oom(ctx.tryMalloc('y', 300 * MiB)); ctx.freeSmall = freeShare(ctx); return r; } },
      {
        caption: 'A real run: gpt2_train with per_process_memory_fraction:0.1 of 140 GiB',
        run: async (ctx) => {
          const conf = `${PT},per_process_memory_fraction:0.1`;
          const f = await ctx.replay(GPT2, conf);
          if (!f.first_oom) throw new Error('expected an out-of-memory error under a 0.1 fraction');
          await ctx.replayTo(GPT2, conf, 140 * GiB, f.first_oom_op + 1);
          ctx.freeReal = freeShare(ctx);
          return { text: `${count(f.ooms)} refused allocation(s); the first: ${f.first_oom}`, expected: 'oom' };
        },
      },
    ],
    conclude: (ctx) => `The limit works as the article says: requests past it fail with most of the device still free (${ctx.freeSmall} in the script, ${ctx.freeReal} on GPT-2’s trace), and the message shows “allowed” beside the free memory, so the cause is plain.`,
  },
];
