# Prints the test files of SQLite's "veryquick" suite (test/permutations.test), one a line,
# relative to the source tree: the definitions of permutations.test up to that suite, without
# tester.tcl (nothing runs). Usage: tclsh list.tcl SQLITE_SOURCE_DIR
set testdir [file join [lindex $argv 0] test]
set f [open [file join $testdir permutations.test]]
set text [read $f]
close $f
set from [string first "proc test_suite " $text]
set to [string first "test_suite \"shell\"" $text]
eval [string range $text $from [expr {$to - 1}]]
array set spec $::testspec(veryquick)
set root [file normalize [lindex $argv 0]]
foreach file [lsort $spec(-files)] {
  if {[file pathtype $file] ne "absolute" && [file dirname $file] eq "."} {
    set file [file join $testdir $file]
  }
  set file [file normalize $file]
  puts [string range $file [expr {[string length $root] + 1}] end]
}
