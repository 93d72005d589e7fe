# Writes the man page shardfeed(1) from the CLI's own help texts (cli/help.c),
# so that the page and 'shardfeed help CMD' never disagree.
# Usage: cmake -DCLI=path/to/shardfeed -DOUT=path/to/shardfeed.1 -P docs/man.cmake
execute_process(COMMAND ${CLI} help --man OUTPUT_FILE ${OUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT}.tmp)
  message(FATAL_ERROR "shardfeed help --man failed (${rc}): no man page")
endif()
file(RENAME ${OUT}.tmp ${OUT})
