// huiyi console: the only script (written here, no library). The pages work without it.
// "Select all" ticks every memory of the table it heads but those a search found only through the
// companion's line they answered (input.pick.via-context: about something else); unticking it unticks all.
document.addEventListener("DOMContentLoaded", function () {
  var all = document.getElementById("select-all");
  if (!all) return;
  all.addEventListener("change", function () {
    document.querySelectorAll("input.pick").forEach(function (box) {
      box.checked = all.checked && !box.classList.contains("via-context");
    });
  });
});
