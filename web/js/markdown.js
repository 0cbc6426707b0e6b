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
// their type taken from the bytes themselves (images.js). markdown-it and
// DOMPurify are the vendored classic scripts index.html loads first.

import { button, el } from './dom.js';

const md = window.markdownit({ html: false, linkify: true, typographer: false });
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
});

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
