// huiyi console: the only script (written here, no library). The pages work without it.
// "Select all" ticks every memory of the table it heads.
document.addEventListener("DOMContentLoaded", function () {
  var all = document.getElementById("select-all");
  if (!all) return;
  all.addEventListener("change", function () {
    document.querySelectorAll("input.pick").forEach(function (box) { box.checked = all.checked; });
  });
});
