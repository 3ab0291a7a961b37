// Refusal: how the page words something it did not do — the problem as the core (or the
// browser) words it, then what the page still shows instead, so that no error leaves a
// reader guessing which state is on screen.

/** A message without its closing full stop, so that another sentence can follow it. */
export function clause(message) {
  return String(message).replace(/\.\s*$/, '');
}

/** "PROBLEM. STILL" — `still` says what the page keeps showing (may be empty). */
export function refusal(problem, still = '') {
  return `${clause(problem)}.${still ? ` ${still}` : ''}`;
}
