/**
 * What a browser would submit from the first form of a page: its action (resolved against the
 * page's URL) and the name/value of each input, entities decoded. For tests that play a browser
 * with fetch; the pages they read are the project's own and the fake GitHub's, not arbitrary HTML.
 */
export function firstForm(page: string, pageUrl: string): { action: string; fields: Record<string, string> } {
  const form = /<form\b([^>]*)>([\s\S]*?)<\/form>/i.exec(page);
  if (!form) throw new Error(`no form on the page:\n${page.slice(0, 500)}`);
  const attr = (tag: string, name: string) => {
    const m = new RegExp(`\\b${name}="([^"]*)"`, 'i').exec(tag);
    return m ? decode(m[1]!) : null;
  };
  const fields: Record<string, string> = {};
  for (const input of form[2]!.matchAll(/<input\b[^>]*>/gi)) {
    const name = attr(input[0], 'name');
    if (name) fields[name] = attr(input[0], 'value') ?? '';
  }
  return { action: new URL(attr(form[1]!, 'action') ?? '', pageUrl).toString(), fields };
}

function decode(s: string): string {
  return s
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');
}
