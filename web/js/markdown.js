// Rendering model output. Model output is untrusted. Answers are Markdown
// — and so are the reasoning parts and compaction summaries shown beside
// them, through the same path (renderMarkdown, here): markdown-it renders
// them with raw HTML off (markup in an answer shows as text), DOMPurify
// sanitizes the result into a DocumentFragment, and the Content Security
// Policy forbids inline script. Everything else — tool calls' arguments
// and output included, which are not even Markdown — reaches the page as
// textContent; no string is ever parsed as HTML in any of these modules.
// Images are shown only as data: URLs of PNG, JPEG, GIF or WebP bytes that
// the page read from a file or the server returned (item/readOutput),
// their type taken from the bytes themselves (images.js). markdown-it,
// DOMPurify and highlight.js are the vendored classic scripts index.html
// loads first.
//
// Code highlighting stays inside that path: highlight.js turns a fenced
// block's text into escaped text and <span class="hljs-…"> (markdown-it's
// highlight option), and its output is sanitized with the rest — a span
// inside code keeps its class alone, and only highlight.js's class names.

import { button, el } from './dom.js';

const md = window.markdownit({ html: false, linkify: true, typographer: false, highlight });
// An image in an answer would load from wherever the model pointed it.
md.disable('image');

const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ['img', 'style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'svg', 'math'],
  FORBID_ATTR: ['style', 'id', 'name'],
};
window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
  if (node.tagName === 'SPAN' && node.closest('pre')) keepTokenClass(node);
});

// HLJS_CLASS is a class highlight.js gives a span: hljs-<scope>, the
// sub-scopes' suffixed names (title.function is "hljs-title function_"),
// and language-<name> around code of another language (a script in HTML).
const HLJS_CLASS = /^(?:hljs-[a-z_-]{1,30}|[a-z]{1,20}_{1,3}|language-[a-z0-9-]{1,30})$/;

/** keepTokenClass strips a code span to highlight.js's classes alone. */
function keepTokenClass(span) {
  for (const name of span.getAttributeNames()) {
    if (name !== 'class') span.removeAttribute(name);
  }
  const kept = [...span.classList].filter((c) => HLJS_CLASS.test(c));
  if (kept.length) span.className = kept.join(' ');
  else span.removeAttribute('class');
}

// HIGHLIGHT_MAX bounds the work of a repaint: a block longer than this
// (64 Ki characters) shows as plain text, whatever its language.
const HIGHLIGHT_MAX = 65536;

// A streaming answer is rendered again as it grows, every block in it:
// the blocks that did not change are highlighted once, then found here.
// The kept blocks hold at most HIGHLIGHT_KEEP characters, oldest dropped
// first.
const highlighted = new Map();
const HIGHLIGHT_KEEP = 4 * HIGHLIGHT_MAX;
let keptChars = 0;

/**
 * highlight is markdown-it's highlight option: a fenced block's text as
 * highlight.js's escaped HTML, or '' for markdown-it to escape it plainly.
 * Only a block that names a language highlight.js knows is highlighted:
 * no guessing for the others (see docs/chat-page.md: unlabelled blocks are
 * mostly output and logs, and guessing runs every grammar at each repaint).
 */
function highlight(code, lang) {
  const hljs = window.hljs;
  if (!hljs || !lang || code.length > HIGHLIGHT_MAX || !hljs.getLanguage(lang)) return '';
  const key = `${lang}\n${code}`;
  let html = highlighted.get(key);
  if (html === undefined) {
    try {
      html = hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
    } catch {
      html = ''; // a grammar that throws: plain text, as markdown-it escapes it
    }
    keptChars += key.length;
    for (const old of highlighted.keys()) {
      if (keptChars <= HIGHLIGHT_KEEP) break;
      highlighted.delete(old);
      keptChars -= old.length;
    }
  } else {
    highlighted.delete(key); // to the newest end
  }
  highlighted.set(key, html);
  return html;
}

/** renderMarkdown renders an answer's text into a sanitized fragment. */
export function renderMarkdown(src) {
  const frag = window.DOMPurify.sanitize(md.render(src), PURIFY);
  for (const pre of frag.querySelectorAll('pre')) decorateCode(pre);
  return frag;
}

/** decorateCode gives a code block a bar with its language and Copy. */
function decorateCode(pre) {
  const code = pre.querySelector('code');
  const lang = code && /(?:^|\s)language-([\w+#.-]{1,30})/.exec(code.className);
  const box = el('div', 'code-block');
  const bar = el('div', 'code-bar');
  bar.append(el('span', 'code-lang', lang ? lang[1] : 'code'));
  bar.append(button('small copy', 'Copy', lang ? `Copy ${lang[1]} code` : 'Copy code'));
  pre.replaceWith(box);
  box.append(bar, pre);
}

/** copyText puts text on the clipboard; false when the browser refuses. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Without clipboard permission: the older, selection-based way.
    const area = el('textarea', 'visually-hidden');
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand('copy');
    area.remove();
    return ok;
  }
}
