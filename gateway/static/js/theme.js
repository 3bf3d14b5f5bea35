// Light and dark: the system's preference unless the person chose one with the toggle
// (remembered in localStorage).

const KEY = 'truerun.theme';
const media = window.matchMedia('(prefers-color-scheme: dark)');

export function effectiveTheme() {
  return localStorage.getItem(KEY) || (media.matches ? 'dark' : 'light');
}

function apply(button) {
  const theme = effectiveTheme();
  document.documentElement.dataset.theme = theme;
  button.setAttribute('aria-pressed', String(theme === 'dark'));
}

export function setupTheme(button) {
  apply(button);
  media.addEventListener('change', () => apply(button));
  button.addEventListener('click', () => {
    localStorage.setItem(KEY, effectiveTheme() === 'dark' ? 'light' : 'dark');
    apply(button);
  });
}
