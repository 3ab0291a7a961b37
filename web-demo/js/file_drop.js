// Drag and drop: a file dropped anywhere on the page opens as if picked in the replay
// view's file box (the one door for a person's own files).
// Invariant: only drags that carry files are taken (text or links dragged within the page
// behave as the browser does); while one hovers, the page is marked `data-dropping`.

/** Calls `open(file)` with the first file dropped on `target`. */
export function acceptDrops(target, open) {
  const carriesFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes('Files');
  const mark = (on) => { document.body.dataset.dropping = String(on); };
  target.addEventListener('dragover', (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
    mark(true);
  });
  target.addEventListener('dragleave', () => mark(false));
  target.addEventListener('drop', (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    mark(false);
    const file = e.dataTransfer.files[0];
    if (file) open(file);
  });
}
