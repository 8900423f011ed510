"""Theme, CSS and the page's script (passed to ``launch()``, as Gradio 6 wants), and the scripts two events run
in the browser (``chat_page.setup_chat_events``, ``chat_page.setup_rating_events``)."""

from __future__ import annotations

import gradio as gr

SYSTEM_FONTS = ("Inter", "ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif")
MONO_FONTS = ("ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace")


def theme() -> gr.themes.Base:
    return gr.themes.Soft(
        primary_hue="indigo",
        secondary_hue="blue",
        neutral_hue="slate",
        radius_size="md",
        spacing_size="sm",
        text_size="sm",
        font=SYSTEM_FONTS,
        font_mono=MONO_FONTS,
    ).set(
        block_padding="10px",
        layout_gap="10px",
    )


CSS = """
.gradio-container { max-width: 1560px !important; }
#d3-header { padding: 0; }
.d3-header { padding: 14px 18px; border-radius: 12px;
  background: linear-gradient(120deg, rgba(79,70,229,.16), rgba(59,130,246,.10) 45%, rgba(245,158,11,.10));
  border: 1px solid var(--border-color-primary); }
.d3-title { font-size: 1.55rem; font-weight: 750; letter-spacing: -.01em; color: var(--body-text-color); }
.d3-logo { font-size: .9rem; letter-spacing: -.12em; margin-right: .35em; vertical-align: .15em;
  background: linear-gradient(90deg,#3b82f6,#10b981,#f59e0b); -webkit-background-clip: text; color: transparent; }
.d3-sub { margin-top: 2px; color: var(--body-text-color-subdued); font-size: .92rem; }
.d3-badges { margin-top: 8px; display: flex; flex-wrap: wrap; gap: 6px; }
.d3-badge { display: inline-block; padding: 2px 10px; border-radius: 999px; font-size: .78rem; font-weight: 600;
  border: 1px solid var(--border-color-primary); background: var(--background-fill-primary);
  color: var(--body-text-color); max-width: 100%; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.d3-preview { border-color: #f59e0b; color: #b45309; background: rgba(245,158,11,.12); }
.dark .d3-preview { color: #fbbf24; }
.d3-exact { border-color: #10b981; color: #047857; background: rgba(16,185,129,.12); }
.dark .d3-exact { color: #34d399; }
.d3-engine { color: var(--body-text-color-subdued); font-weight: 500; }
.d3-header .d3-incomplete { margin: 10px 0 0; }
.d3-header.d3-compact { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 16px; padding: 8px 16px; }
.d3-compact .d3-title { font-size: 1.25rem; }
.d3-compact .d3-badges { margin-top: 0; }
.d3-compact .d3-incomplete { flex-basis: 100%; margin: 2px 0 0; }

#status { min-height: 1.6em; font-size: .88rem; }
#status p { margin: 0; }

.d3-summary { font-size: .86rem; }
.d3-summary.d3-empty { color: var(--body-text-color-subdued); padding: 6px 2px; }
.d3-table { width: 100%; border-collapse: collapse; }
.d3-table th { text-align: left; font-weight: 600; color: var(--body-text-color-subdued);
  border-bottom: 1px solid var(--border-color-primary); padding: 3px 6px; font-size: .78rem; }
.d3-table td { padding: 3px 6px; border-bottom: 1px solid var(--border-color-accent-subdued, rgba(127,127,127,.12)); }
.d3-table .d3-num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.d3-table .d3-detail { color: var(--body-text-color-subdued); font-size: .8rem; }
.d3-table tr.d3-total td { font-weight: 700; border-top: 1px solid var(--border-color-primary); }
.d3-table tr.d3-over td { color: #ef4444; }
.d3-dot { display: inline-block; width: 9px; height: 9px; border-radius: 3px; margin-right: 7px; vertical-align: 0; }
.d3-incomplete { margin: 0 0 8px; padding: 8px 10px; border-radius: 8px; border: 1px solid #ef4444;
  background: rgba(239,68,68,.12); color: var(--body-text-color); font-size: .85rem; }
.d3-audio-reason { margin: 0 0 8px; padding: 6px 10px; border-radius: 8px; font-size: .8rem;
  border-left: 3px solid #f59e0b; background: rgba(245,158,11,.08); }
.d3-audio-reason.d3-ok { border-left-color: #10b981; background: rgba(16,185,129,.08); }

.d3-stream { display: flex; flex-wrap: wrap; gap: 4px; align-items: center; padding: 4px 0; }
.d3-chip { display: inline-block; padding: 2px 8px; border-radius: 6px; font-size: .76rem;
  font-variant-numeric: tabular-nums; white-space: nowrap; border: 1px solid transparent; }
.d3-chip-frame { background: rgba(59,130,246,.14); border-color: rgba(59,130,246,.45); }
.d3-chip-audio { background: rgba(245,158,11,.18); border-color: rgba(245,158,11,.6); font-weight: 600; }
.d3-chip-text { background: rgba(16,185,129,.14); border-color: rgba(16,185,129,.45); font-family: var(--font-mono); }
.d3-sep { display: inline-block; width: 1px; height: 18px; background: var(--border-color-primary); margin: 0 4px; }
.d3-legend { font-size: .76rem; color: var(--body-text-color-subdued); margin-top: 4px; }

.d3-plot { min-height: 0 !important; }
.d3-plot img { max-height: 340px; object-fit: contain; }
#frames-gallery .caption-label, #grid-gallery .caption-label { max-width: 100% !important; left: 0; right: 0 !important;
  bottom: 0 !important; white-space: normal !important; opacity: .92 !important; font-size: .72rem !important;
  font-variant-numeric: tabular-nums; text-align: center !important; border-radius: 0 !important;
  border-left: 0 !important; }
#summary .d3-table, #summary .d3-table th, #summary .d3-table td { border-left: 0 !important;
  border-right: 0 !important; border-top: 0; background: transparent !important; }
#summary .d3-table { border: 0 !important; margin: 0; }
#summary .d3-table tr { border: 0 !important; background: transparent !important; }
#summary .d3-table td:first-child { white-space: nowrap; }
#grid-info table, #mel-info table, #solver-md table { font-size: .82rem; margin: 4px 0; }
#grid-info td, #grid-info th, #mel-info td, #mel-info th, #solver-md td, #solver-md th { padding: 3px 10px !important; }
#images-input .file-preview-holder, #images-input table { max-height: 150px; overflow-y: auto; }
#frames-gallery:not(:has(img)), #grid-gallery:not(:has(img)) { display: none !important; }
/* One image: Gradio drops to one column of square tiles, wider than the gallery is tall; keep it in view. */
#grid-gallery .grid-container:has(> .gallery-item:only-child) .thumbnail-item {
  aspect-ratio: auto !important; height: 410px !important; padding-bottom: 28px !important; }
#frames-info ul { margin-top: 4px; }
#frames-info li { margin: 2px 0; }
#grid-info td, #grid-info th, #mel-info td, #mel-info th, #solver-md td, #solver-md th {
  border-color: var(--border-color-primary) !important; }
#grid-info table, #mel-info table, #solver-md table { border-color: var(--border-color-primary) !important; }
.d3-table .d3-detail { white-space: nowrap; font-size: .74rem; }
.d3-note { font-size: .8rem; color: var(--body-text-color-subdued); }
#chat-help textarea { font-size: .85rem; }

/* ---- chat */
#engine-status { font-size: .84rem; color: var(--body-text-color-subdued); }
#engine-status p { margin: 0; }
#chat-input-row { align-items: stretch; }
#chat-input-row button { min-height: 42px; }
#chat-figures { font-size: .8rem; color: var(--body-text-color-subdued); font-variant-numeric: tabular-nums;
  padding: 6px 10px; border-radius: 8px; background: var(--background-fill-secondary);
  border: 1px solid var(--border-color-primary); min-height: 2.2em; }
#chat-figures:has(> div:empty), #chat-figures:not(:has(p)) { display: none !important; }
#chat-figures p { margin: 1px 0; }
#chat-figures code { font-size: .74rem; display: inline !important; padding: 0 3px !important; white-space: normal; }
/* the request as sent: code blocks keep their lines (the copy button copies what is drawn), scroll when long */
#chat-figures .d3-request pre code, .d3-request pre code { display: block !important; white-space: pre !important;
  padding: 0 !important; font-size: .72rem; }
.d3-request pre { max-height: 22em; overflow: auto; }
/* closed, the prompt's fold and the request's share one line under the figures (the chat keeps its height) */
#chat-figures details.d3-prompt:not([open]), #chat-figures details.d3-request:not([open]) { display: inline-block;
  margin-right: 1.5em; }
#chatbot .message-wrap .message { font-size: .92rem; }
/* Model HTML keeps inline styles after Gradio's sanitizer: keep position:fixed overlays inside their bubble. */
#chatbot .message-content { contain: layout paint; }
#tools-status { font-size: .8rem; }
#tools-status p { margin: 0; }
#tool-panel table { font-size: .78rem; }
#tool-panel td { font-family: var(--font-mono); }

/* ---- work layout (an engine attached): uploads · what the model sees · chat, in one screen */
.d3-glance { gap: 6px !important; }
.d3-strip { font-size: .8rem; }
.d3-strip.d3-empty { color: var(--body-text-color-subdued); padding: 8px 4px; }
.d3-strip-head { margin: 0 0 6px; font-variant-numeric: tabular-nums; color: var(--body-text-color-subdued); }
.d3-strip-head b { color: var(--body-text-color); }
.d3-strip-frames { display: grid; grid-template-columns: repeat(auto-fill, minmax(78px, 1fr)); gap: 5px;
  max-height: 232px; overflow-y: auto; }
.d3-frame { margin: 0; display: flex; flex-direction: column; min-width: 0;
  border: 1px solid var(--border-color-primary); border-radius: 6px; overflow: hidden;
  background: var(--background-fill-secondary); }
.d3-frame img { display: block; width: 100%; aspect-ratio: 16 / 9; object-fit: contain; background: #0f172a; }
.d3-frame figcaption { font-size: .68rem; line-height: 1.25; padding: 2px 0 3px; text-align: center;
  font-variant-numeric: tabular-nums; color: var(--body-text-color-subdued); }
.d3-frame figcaption b { display: block; color: var(--body-text-color); font-weight: 600; }
#glance-links { flex-wrap: nowrap; gap: 4px !important; }
#glance-links button { flex: 1 1 0; min-width: 0 !important; font-size: .72rem; padding: 2px 4px; min-height: 26px;
  white-space: nowrap; }
/* the empty drop zones, shorter (Gradio's are 240 px tall) */
#work-row .upload-container .wrap { min-height: 0 !important; height: 100% !important; padding: 2px !important; }
#work-row #audio-tabs .upload-container { height: 64px !important; min-height: 0 !important; }
#work-row #audio-tabs .upload-container .icon-wrap { display: none; }
/* short drop zones say "Drop … Here - or - Click to Upload" on one line */
#work-row #images-input [data-testid="upload-text"], #work-row #audio-tabs [data-testid="upload-text"],
#work-row #video-input [data-testid="upload-text"] {
  flex-direction: row !important; flex-wrap: wrap; justify-content: center; align-items: center; gap: 0 6px;
  font-size: .86rem !important; }
#work-row #images-input .upload-container { padding-top: 22px; }
#work-row #images-input .upload-container .icon-wrap { display: none; }

#work-row #status { font-size: .8rem; }
#work-row #images-input .file-preview-holder, #work-row #images-input table { max-height: 70px; }
.d3-actions, .d3-rating { gap: 6px !important; align-items: center; }
.d3-actions button, .d3-rating button { min-height: 30px; }
#rate-status, #record-status { font-size: .78rem; color: var(--body-text-color-subdued); }
#rate-status p, #record-status p { margin: 0; }
#rate-status:not(:has(p)), #record-status:not(:has(p)) { display: none !important; }

/* ---- the work layout's first screen (issue 18): nothing overflows, nothing overlaps */
.d3-compact .d3-badges { min-width: 0; flex: 1 1 auto; }
.d3-header.d3-compact { padding: 6px 14px; gap: 4px 14px; }
.d3-compact .d3-title { font-size: 1.12rem; white-space: nowrap; }
.d3-compact .d3-badge { font-size: .72rem; padding: 1px 8px; }
/* the compact header keeps to one line while the window is wide: a long badge ends in "…" (its title says it all) */
@media (min-width: 701px) {
  .d3-header.d3-compact { flex-wrap: nowrap; }
  .d3-compact .d3-badges { flex-wrap: nowrap; overflow: hidden; }
  .d3-compact .d3-badge { flex: 0 1 auto; }
}
#examples-slot #examples .label { font-size: .78rem !important; margin-bottom: 4px !important; }
#examples-slot #examples .gallery { gap: 4px !important; }
#examples-slot #examples .gallery-item { font-size: .74rem !important; padding: 2px 8px !important;
  line-height: 1.35 !important; }
#work-row #temperature, #work-row #max-tokens, #work-row #seed { --block-label-text-size: .74rem;
  --block-info-text-size: .74rem; --block-title-text-size: .74rem; }
#work-row #max-tokens, #work-row #seed { padding: 6px 8px !important; }
#work-row #max-tokens input, #work-row #seed input { padding: 4px 8px !important; }
.d3-badge { min-width: 0; }
@media (max-width: 700px) {
  .d3-badge { white-space: normal; overflow-wrap: anywhere; text-align: left; }
  .d3-header, .d3-header.d3-compact { padding: 8px 10px; }
}
#glance-links { flex-wrap: wrap !important; row-gap: 4px !important; }
#glance-links button { flex: 1 1 auto !important; min-width: fit-content !important; }
#examples-slot { gap: 4px !important; }
#examples-slot #examples { padding: 0 !important; }
#glance:has(#summary .d3-empty) .d3-no-video, #glance:not(:has(#summary .d3-empty)) .d3-hint,
#glance:has(#summary .d3-empty) #summary { display: none !important; }
#glance .d3-hint { padding: 10px 12px; border-radius: 10px; border: 1px dashed var(--border-color-primary);
  background: var(--background-fill-secondary); font-size: .82rem; color: var(--body-text-color); }
#glance .d3-hint b { font-weight: 650; }
#glance .d3-hint ul { margin: 6px 0; padding-left: 18px; }
#glance .d3-hint li { margin: 2px 0; color: var(--body-text-color-subdued); }
#glance .d3-hint p { margin: 4px 0 0; color: var(--body-text-color-subdued); }
.d3-quick { margin-top: 2px; }
#uploads-column #quick-sampling input[type=number] { font-variant-numeric: tabular-nums; }
/* a code block's label (the tools editor) never runs under its copy and download buttons */
#tools-json [data-testid="block-label"] { max-width: calc(100% - 76px); overflow: hidden; text-overflow: ellipsis;
  white-space: nowrap; }
/* the reply picker: its text ends before the arrow */
#rate-reply input { padding-right: 34px !important; text-overflow: ellipsis; overflow: hidden; white-space: nowrap; }
@media (min-width: 701px) { #rating-row { flex-wrap: nowrap; } }
/* the picked reply: its 👍/👎 pressed (rating_md's marker says which), its bubbles marked (PAGE_JS) */
.gradio-container:has(#rate-status .d3-picked.d3-verdict-up) #rate-up,
.gradio-container:has(#rate-status .d3-picked.d3-verdict-down) #rate-down {
  background: rgba(99,102,241,.22) !important; border-color: #6366f1 !important; box-shadow: inset 0 0 0 1px #6366f1; }
#chatbot .d3-picked-reply { box-shadow: inset 3px 0 0 rgba(99,102,241,.85); background: rgba(99,102,241,.06);
  border-radius: 4px; }
/* media a question carries, small in its bubble: the question and its reply fit in the chat together */
#chatbot [data-testid=user] video, #chatbot [data-testid=user] img { max-height: 160px !important;
  width: auto !important; max-width: 100%; }
"""

# Run once when the page has loaded (``launch(js=…)``); from then on, whenever the page changes (at most once a
# frame):
# * the work layout's chat is as tall as the window leaves room for: the chat column (next to the upload panels)
#   ends at the window's bottom, the Chatbot getting what the other parts of the column leave (at least
#   240 px), so a question stays in view above a long reply and the rating row stays in the first screen;
# * the rating row's marker (``chat_views.picked_marker``, in the rating line) shows the picked reply: its 👍/👎
#   pressed (``aria-pressed``; the CSS above draws it) and its bubbles marked in the chat.
# ``window.d3Studio.showPicked()`` scrolls the chat to the picked reply (``SHOW_PICKED_REPLY_JS``).
PAGE_JS = """() => {
  const MIN_CHAT = 240, MARGIN = 12;  // px
  const bubbles = () => [...document.querySelectorAll('#chatbot .message-row > .role > .message > .message')];
  const picked = () => document.querySelector('#rate-status .d3-picked');
  const fit = () => {
    const panel = document.getElementById('chat-panel'), chat = document.getElementById('chatbot');
    const uploads = document.getElementById('uploads-column');
    if (!panel || !chat || !uploads) return;
    const top = panel.getBoundingClientRect().top + window.scrollY;
    if (Math.abs(top - (uploads.getBoundingClientRect().top + window.scrollY)) > 2) {  // stacked: a narrow window
      const tall = Math.max(MIN_CHAT, Math.floor(window.innerHeight * 0.62)) + 'px';
      if (chat.style.height !== tall) chat.style.setProperty('height', tall, 'important');
      return;
    }
    const rest = panel.getBoundingClientRect().height - chat.getBoundingClientRect().height;
    const height = Math.max(MIN_CHAT, Math.floor(window.innerHeight - top - rest - MARGIN));
    if (chat.style.height !== height + 'px') chat.style.setProperty('height', height + 'px', 'important');
  };
  const mark = () => {
    const pick = picked();
    const said = prefix => {  // the marker's class d3-<prefix>-<value>
      const found = pick ? [...pick.classList].find(c => c.startsWith('d3-' + prefix + '-')) : undefined;
      return found === undefined ? '' : found.slice(prefix.length + 4);
    };
    const verdict = said('verdict');
    for (const [id, side] of [['rate-up', 'up'], ['rate-down', 'down']]) {
      const button = document.getElementById(id);
      if (button && button.getAttribute('aria-pressed') !== String(verdict === side)) {
        button.setAttribute('aria-pressed', String(verdict === side));
      }
    }
    const first = said('first') === '' ? -1 : Number(said('first'));
    const end = said('end') === '' ? -1 : Number(said('end'));
    bubbles().forEach((bubble, index) => {
      const on = index >= first && index < end;
      if (bubble.classList.contains('d3-picked-reply') !== on) bubble.classList.toggle('d3-picked-reply', on);
    });
  };
  const showPicked = () => {
    mark();
    const bubble = document.querySelector('#chatbot .d3-picked-reply');
    const scroller = bubble && bubble.closest('.bubble-wrap');
    if (!scroller) return;
    const offset = bubble.getBoundingClientRect().top - scroller.getBoundingClientRect().top;
    scroller.scrollTo({top: scroller.scrollTop + offset - 8, behavior: 'instant'});
  };
  let queued = false;
  const update = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; fit(); mark(); });
  };
  window.d3Studio = {showPicked};
  new MutationObserver(update).observe(document.body, {childList: true, subtree: true, characterData: true});
  window.addEventListener('resize', update);
  update();
}"""

# After a reply was picked (its rating line is on the page): scroll the chat to it.
SHOW_PICKED_REPLY_JS = """async () => {
  await new Promise(resolve => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  window.d3Studio?.showPicked();
  return [];
}"""

# Before "↻ from this reply": when it would drop a rating or a note (the marker's title says what), ask; a "no"
# stops the event before anything is sent (a throw ends an event's chain in Gradio's page).
CONFIRM_REGENERATE_FROM_JS = """() => {
  const question = document.querySelector('#rate-status .d3-picked')?.title;
  if (question && !window.confirm(question)) throw new Error('kept: the researcher said no');
  return [];
}"""
